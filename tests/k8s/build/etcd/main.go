// Command etcd is upstream etcd's server, built here so that the Kubernetes end-to-end test
// needs no download beyond Go modules.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
