/* One stub per function of lazy-symbols.h, in place of the library's own: the first call goes through
 * announce_lazy_trampoline to announce_lazy_resolve (lazy.c), which loads the library, finds the function and
 * keeps its address in the stub's slot; every call after that is two instructions and a jump. The trampoline
 * saves and restores every register that can carry an argument, so any C function (variadic ones too) can sit
 * behind a stub. The stubs are hidden: libraries loaded later (ALSA's plugins) bind to the real functions. */

#if defined(__x86_64__)

#define LAZY_LIBRARY(index, soname)
#define LAZY_SYMBOL(library, name)                                                                              \
    .bss; .balign 8; .Lslot_##name: .zero 8;                                                                    \
    .section .rodata.str1.1, "aMS", @progbits, 1; .Lname_##name: .asciz #name;                                 \
    .section .data.rel.ro, "aw"; .balign 8;                                                                     \
    .globl announce_lazy_symbol_##name; .hidden announce_lazy_symbol_##name;                                    \
    announce_lazy_symbol_##name: .quad .Lslot_##name; .quad .Lname_##name; .quad library;                       \
    .text; .balign 16; .globl name; .hidden name; .type name, @function;                                        \
    name: movq .Lslot_##name(%rip), %r11; testq %r11, %r11; jz 1f; jmp *%r11;                                   \
    1: leaq announce_lazy_symbol_##name(%rip), %r11; jmp announce_lazy_trampoline;                              \
    .size name, . - name;

#include "lazy-symbols.h"

    .text
    .balign 16
    .type announce_lazy_trampoline, @function
/* %r11: the symbol's descriptor. The stack is 8 off 16-byte alignment here (the caller's return address). */
announce_lazy_trampoline:
    subq $200, %rsp
    movq %rdi, 0(%rsp)
    movq %rsi, 8(%rsp)
    movq %rdx, 16(%rsp)
    movq %rcx, 24(%rsp)
    movq %r8, 32(%rsp)
    movq %r9, 40(%rsp)
    movq %rax, 48(%rsp)
    movdqu %xmm0, 56(%rsp)
    movdqu %xmm1, 72(%rsp)
    movdqu %xmm2, 88(%rsp)
    movdqu %xmm3, 104(%rsp)
    movdqu %xmm4, 120(%rsp)
    movdqu %xmm5, 136(%rsp)
    movdqu %xmm6, 152(%rsp)
    movdqu %xmm7, 168(%rsp)
    movq %r11, %rdi
    call announce_lazy_resolve
    movq %rax, %r11
    movdqu 168(%rsp), %xmm7
    movdqu 152(%rsp), %xmm6
    movdqu 136(%rsp), %xmm5
    movdqu 120(%rsp), %xmm4
    movdqu 104(%rsp), %xmm3
    movdqu 88(%rsp), %xmm2
    movdqu 72(%rsp), %xmm1
    movdqu 56(%rsp), %xmm0
    movq 48(%rsp), %rax
    movq 40(%rsp), %r9
    movq 32(%rsp), %r8
    movq 24(%rsp), %rcx
    movq 16(%rsp), %rdx
    movq 8(%rsp), %rsi
    movq 0(%rsp), %rdi
    addq $200, %rsp
    jmp *%r11
    .size announce_lazy_trampoline, . - announce_lazy_trampoline

#elif defined(__aarch64__)

#define LAZY_LIBRARY(index, soname)
#define LAZY_SYMBOL(library, name)                                                                              \
    .bss; .balign 8; .Lslot_##name: .zero 8;                                                                    \
    .section .rodata.str1.1, "aMS", @progbits, 1; .Lname_##name: .asciz #name;                                 \
    .section .data.rel.ro, "aw"; .balign 8;                                                                     \
    .globl announce_lazy_symbol_##name; .hidden announce_lazy_symbol_##name;                                    \
    announce_lazy_symbol_##name: .quad .Lslot_##name; .quad .Lname_##name; .quad library;                       \
    .text; .balign 16; .globl name; .hidden name; .type name, %function;                                        \
    name: adrp x16, .Lslot_##name; ldr x17, [x16, :lo12:.Lslot_##name]; cbz x17, 1f; br x17;                    \
    1: adrp x16, announce_lazy_symbol_##name; add x16, x16, :lo12:announce_lazy_symbol_##name;                  \
    b announce_lazy_trampoline;                                                                                 \
    .size name, . - name;

#include "lazy-symbols.h"

    .text
    .balign 16
    .type announce_lazy_trampoline, %function
/* x16: the symbol's descriptor. x0–x7, x8 (indirect result) and q0–q7 can carry arguments. */
announce_lazy_trampoline:
    stp x29, x30, [sp, #-224]!
    mov x29, sp
    stp x0, x1, [sp, #16]
    stp x2, x3, [sp, #32]
    stp x4, x5, [sp, #48]
    stp x6, x7, [sp, #64]
    str x8, [sp, #80]
    stp q0, q1, [sp, #96]
    stp q2, q3, [sp, #128]
    stp q4, q5, [sp, #160]
    stp q6, q7, [sp, #192]
    mov x0, x16
    bl announce_lazy_resolve
    mov x17, x0
    ldp q6, q7, [sp, #192]
    ldp q4, q5, [sp, #160]
    ldp q2, q3, [sp, #128]
    ldp q0, q1, [sp, #96]
    ldr x8, [sp, #80]
    ldp x6, x7, [sp, #64]
    ldp x4, x5, [sp, #48]
    ldp x2, x3, [sp, #32]
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #224
    br x17
    .size announce_lazy_trampoline, . - announce_lazy_trampoline

#else
#error "stubs.S: no lazy-loading stubs for this architecture (x86_64 and aarch64 only)"
#endif

    .section .note.GNU-stack, "", @progbits
