// Generated from batched_copy.cu; do not edit. Made with CUDA 13.0's
//   nvcc -ptx -arch=compute_75 batched_copy.cu
// and then `.version` lowered to 7.0 and `.target` to sm_60 (the code uses only instructions
// that PTX 7.0 has on sm_60), so that drivers from CUDA 11.0 on, and Pascal GPUs on, can
// compile it. BUILD.md ('GPU (NCCL)') says how to remake it.
#pragma once

namespace tfring {

inline constexpr char kBatchedCopyPtx[] = R"PTX(
.version 7.0
.target sm_60
.address_size 64

	// .globl	tfring_batched_copy

.visible .entry tfring_batched_copy(
	.param .align 8 .b8 tfring_batched_copy_param_0[1536]
)
{
	.reg .pred 	%p<9>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<15>;
	.reg .b64 	%rd<42>;


	mov.b64 	%rd19, tfring_batched_copy_param_0;
	mov.u32 	%r1, %ctaid.y;
	mul.wide.u32 	%rd21, %r1, 8;
	add.s64 	%rd22, %rd19, %rd21;
	ld.param.u64 	%rd23, [%rd22];
	cvta.to.global.u64 	%rd1, %rd23;
	ld.param.u64 	%rd24, [%rd22+512];
	cvta.to.global.u64 	%rd2, %rd24;
	ld.param.u64 	%rd3, [%rd22+1024];
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mul.wide.u32 	%rd25, %r2, %r3;
	mov.u32 	%r4, %tid.x;
	cvt.u64.u32 	%rd26, %r4;
	add.s64 	%rd4, %rd25, %rd26;
	mov.u32 	%r5, %nctaid.x;
	mul.wide.u32 	%rd5, %r5, %r3;
	or.b64  	%rd6, %rd24, %rd23;
	and.b64  	%rd27, %rd6, 15;
	setp.eq.s64 	%p1, %rd27, 0;
	@%p1 bra 	$L__BB0_6;

	and.b64  	%rd29, %rd6, 3;
	setp.ne.s64 	%p2, %rd29, 0;
	mov.u64 	%rd40, 0;
	@%p2 bra 	$L__BB0_10;

	shr.u64 	%rd7, %rd3, 2;
	setp.ge.u64 	%p3, %rd4, %rd7;
	@%p3 bra 	$L__BB0_5;

	mov.u64 	%rd38, %rd4;

$L__BB0_4:
	shl.b64 	%rd30, %rd38, 2;
	add.s64 	%rd31, %rd1, %rd30;
	ld.global.u32 	%r6, [%rd31];
	add.s64 	%rd32, %rd2, %rd30;
	st.global.u32 	[%rd32], %r6;
	add.s64 	%rd38, %rd38, %rd5;
	setp.lt.u64 	%p4, %rd38, %rd7;
	@%p4 bra 	$L__BB0_4;

$L__BB0_5:
	and.b64  	%rd40, %rd3, -4;
	bra.uni 	$L__BB0_10;

$L__BB0_6:
	shr.u64 	%rd11, %rd3, 4;
	setp.ge.u64 	%p5, %rd4, %rd11;
	@%p5 bra 	$L__BB0_9;

	mov.u64 	%rd39, %rd4;

$L__BB0_8:
	shl.b64 	%rd33, %rd39, 4;
	add.s64 	%rd34, %rd2, %rd33;
	add.s64 	%rd35, %rd1, %rd33;
	ld.global.v4.u32 	{%r7, %r8, %r9, %r10}, [%rd35];
	st.global.v4.u32 	[%rd34], {%r7, %r8, %r9, %r10};
	add.s64 	%rd39, %rd39, %rd5;
	setp.lt.u64 	%p6, %rd39, %rd11;
	@%p6 bra 	$L__BB0_8;

$L__BB0_9:
	and.b64  	%rd40, %rd3, -16;

$L__BB0_10:
	add.s64 	%rd41, %rd40, %rd4;
	setp.ge.u64 	%p7, %rd41, %rd3;
	@%p7 bra 	$L__BB0_12;

$L__BB0_11:
	add.s64 	%rd36, %rd1, %rd41;
	ld.global.u8 	%rs1, [%rd36];
	add.s64 	%rd37, %rd2, %rd41;
	st.global.u8 	[%rd37], %rs1;
	add.s64 	%rd41, %rd41, %rd5;
	setp.lt.u64 	%p8, %rd41, %rd3;
	@%p8 bra 	$L__BB0_11;

$L__BB0_12:
	ret;

}
)PTX";

}  // namespace tfring
