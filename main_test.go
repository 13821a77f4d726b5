package zerodrop_test

import (
	"os"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("generation", generationMain)
	netnstest.RegisterHelper("activated", activatedMain)
	netnstest.RegisterHelper("resume", resumeMain)
	netnstest.RegisterHelper("cpuworker", cpuWorkerMain)
	netnstest.RegisterHelper("table", tableMain)
	netnstest.RegisterHelper("signals", signalsMain)
	netnstest.RegisterHelper("resume-activated", resumeActivatedMain)
	netnstest.HelperMain()
	os.Exit(m.Run())
}
