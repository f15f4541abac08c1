; The TVM walkthrough's vector add in kiln's portable kernel dialect (DESIGN §4.1):
; C[i] = A[i] + B[i] for i < n, one work-item per element, blocks of any size.
; The same text compiles for the CPU, AMD GPUs (gfx942, ...) and NVIDIA GPUs (sm_90, ...).

define void @myadd(ptr noalias %A, ptr noalias %B, ptr noalias %C, i32 %n) section "kiln.kernel" {
entry:
  %bx = call i32 @__kiln_group_id(i32 0)
  %bs = call i32 @__kiln_group_size(i32 0)
  %tx = call i32 @__kiln_local_id(i32 0)
  %base = mul i32 %bx, %bs
  %i = add i32 %base, %tx
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done

body:
  %j = sext i32 %i to i64
  %pa = getelementptr inbounds float, ptr %A, i64 %j
  %pb = getelementptr inbounds float, ptr %B, i64 %j
  %pc = getelementptr inbounds float, ptr %C, i64 %j
  %a = load float, ptr %pa, align 4
  %b = load float, ptr %pb, align 4
  %sum = fadd float %a, %b
  store float %sum, ptr %pc, align 4
  br label %done

done:
  ret void
}

declare i32 @__kiln_group_id(i32)
declare i32 @__kiln_group_size(i32)
declare i32 @__kiln_local_id(i32)
