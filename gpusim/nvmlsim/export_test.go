package nvmlsim

// OwnPolls counts the requests set made itself (not through the library's refreshes).
func OwnPolls(set *EventSet) int {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.polls
}
