package nvmlsim

import "time"

// OwnPolls counts the requests set made itself (not through the library's refreshes).
func OwnPolls(set *EventSet) int {
	set.mu.Lock()
	defer set.mu.Unlock()
	return set.polls
}

// GPMSampleTime is the time stamp of the reading s came from.
func GPMSampleTime(s any) time.Time { return s.(*GpmSample).at }
