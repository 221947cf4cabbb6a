package hostile

// haveInt80: this engine can make i386 system calls (int 0x80).
const haveInt80 = true

// int80Socket makes socket(AF_VSOCK, SOCK_STREAM, 0) through int 0x80 (int80_amd64.s).
func int80Socket() int64
