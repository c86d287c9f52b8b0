//! Compiles `shmpipe-c`'s C calls (c/capi_inline.c) against the
//! committed header, so that the bench measures what a C program gets.

fn main() {
    println!("cargo:rerun-if-changed=c/capi_inline.c");
    println!("cargo:rerun-if-changed=../../include/shmpipe.h");
    cc::Build::new()
        .file("c/capi_inline.c")
        .include("../../include")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("shmpipe_bench_c");
}
