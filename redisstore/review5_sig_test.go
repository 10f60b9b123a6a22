package redisstore

import "syscall"

const (
	syscall_SIGSTOP = syscall.SIGSTOP
	syscall_SIGCONT = syscall.SIGCONT
)
