//go:build linux

#include "textflag.h"

// func storeAligned16(dst, src *byte, n uintptr)
// Copies n bytes (a multiple of 16) from src to dst, which is 16-byte
// aligned, with 16-byte aligned stores (MOVO): every aligned 8-byte word of
// dst is written by one store.
TEXT ·storeAligned16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $64
	JB   store16
store64:
	MOVOU 0(SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVO  X0, 0(DI)
	MOVO  X1, 16(DI)
	MOVO  X2, 32(DI)
	MOVO  X3, 48(DI)
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $64, CX
	CMPQ  CX, $64
	JAE   store64
store16:
	CMPQ  CX, $16
	JB    storedone
	MOVOU 0(SI), X0
	MOVO  X0, 0(DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $16, CX
	JMP   store16
storedone:
	RET

// func loadAligned16(dst, src *byte, n uintptr)
// Copies n bytes (a multiple of 16) from src, which is 16-byte aligned, to
// dst with 16-byte aligned loads (MOVO): every aligned 8-byte word of src is
// read by one load.
TEXT ·loadAligned16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $64
	JB   load16
load64:
	MOVO  0(SI), X0
	MOVO  16(SI), X1
	MOVO  32(SI), X2
	MOVO  48(SI), X3
	MOVOU X0, 0(DI)
	MOVOU X1, 16(DI)
	MOVOU X2, 32(DI)
	MOVOU X3, 48(DI)
	ADDQ  $64, SI
	ADDQ  $64, DI
	SUBQ  $64, CX
	CMPQ  CX, $64
	JAE   load64
load16:
	CMPQ  CX, $16
	JB    loaddone
	MOVO  0(SI), X0
	MOVOU X0, 0(DI)
	ADDQ  $16, SI
	ADDQ  $16, DI
	SUBQ  $16, CX
	JMP   load16
loaddone:
	RET
