package procfs

import "syscall"

// Reading the stat file of a process that is being reaped fails with ESRCH.
var errESRCH error = syscall.ESRCH
