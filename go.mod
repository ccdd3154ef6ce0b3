module github.com/muxflow/muxflow

go 1.26.8

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
)
