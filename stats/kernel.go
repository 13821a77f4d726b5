package stats

import "github.com/zerodrop/zerodrop/reuseport"

// ReadKernel reads the kernel counters and net.ipv4.tcp_migrate_req of the
// calling thread's network namespace. The counters are
// reuseport.ReadCounters', which allocates little.
func ReadKernel() Kernel {
	var k Kernel
	c, err := reuseport.ReadCounters()
	if err != nil {
		k.Err = err.Error()
	}
	k.Counters = c
	if on, err := reuseport.MigrationEnabled(); err == nil {
		k.MigrateReq = &on
	}
	return k
}
