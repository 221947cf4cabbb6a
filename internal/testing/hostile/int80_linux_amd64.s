#include "textflag.h"

// func int80Socket() int64
// socket(AF_VSOCK, SOCK_STREAM, 0) through int 0x80: i386 socket is 359. The result is eax,
// sign-extended (a negative errno on failure).
TEXT ·int80Socket(SB), NOSPLIT, $0-8
	MOVL $359, AX
	MOVL $40, BX
	MOVL $1, CX
	XORL DX, DX
	INT $0x80
	MOVLQSX AX, AX
	MOVQ AX, ret+0(FP)
	RET
