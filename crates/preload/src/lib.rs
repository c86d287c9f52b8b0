//! `shmpipe-preload`: the library `shmpipe run` puts in `LD_PRELOAD` of an
//! unmodified program and of every process it starts.
//!
//! It wraps the calls that make pipes and Unix stream socket pairs and the
//! calls that use, copy or close their descriptors. The descriptor a program
//! sees is always the real kernel pipe or socket; the library keeps, beside
//! it, what each descriptor is (`table`) and how many bytes crossed it
//! (`stats`). By default a pipe's bytes travel on a ring in shared memory
//! (stage 2b of docs/run.md, which says what is wrapped, what goes to the
//! kernel and why), and a socket pair's `write` may hand its bytes
//! straight to a reader that waits in the library's `read` (`handover`,
//! stage 2a); `SHMPIPE_RUN_RINGS` (`switch`) keeps only 2a (`1`) or
//! neither (`0`).
//!
//! The layers: `sys` declares the C calls and finds the real ones (the
//! next definition after this library, `dlsym(RTLD_NEXT)`); `table`,
//! `stats`, `pid` (this process's pid, cached where a child cannot
//! inherit it) and `checked` (the program's buffers touched only where
//! the kernel would have, with `main_stack`, the memory known to be
//! mapped) use it; `slot_protocol` (a slot's phases and the
//! moves between them, with no system call, so that a loom model runs it)
//! uses only `sync` (its atomics), as does `resident_protocol` (stage 2b:
//! which path a pipe's bytes take, a ring or the kernel pipe; `resident`
//! is its ring and the system calls it asks for, `rings` the pool of
//! rings and which descriptor uses which (turned off, with no ring left
//! behind, by `ring_switch`, which uses only `sync`), `ring_io` the hooks' paths
//! through them, and `spill_hooks` the wrappers that hand a ring's pipe
//! to the kernel first); `switch` says which paths `SHMPIPE_RUN_RINGS`
//! asks for; `arena` (the hand-over's shared memory, whose slots hold the
//! protocol's words) uses `sys`, `checked` and
//! `slot_protocol`; `handover` uses those; `hooks`,
//! `mapping_hooks` and `syscall_hook` (the exported symbols) use the
//! others.
//!
//! Every hook is as async-signal-safe as the call it wraps: it touches only
//! atomics in static or shared memory and makes system calls; it never
//! allocates, locks or starts a thread.

// Under loom (`cfg(all(test, loom))`) the crate is the slot protocol and
// its models: the hooks would interpose on the model checker's own calls,
// and the rest needs them or the system.
#[cfg(not(all(test, loom)))]
mod arena;
#[cfg(not(all(test, loom)))]
mod checked;
#[cfg(not(all(test, loom)))]
mod counted_handlers;
#[cfg(not(all(test, loom)))]
mod handover;
#[cfg(not(all(test, loom)))]
mod hooks;
#[cfg(all(test, loom))]
mod loom_check;
#[cfg(not(all(test, loom)))]
mod main_stack;
#[cfg(not(all(test, loom)))]
mod mapping_hooks;
#[cfg(not(all(test, loom)))]
mod pid;
mod signal_gate;
// Stage 2b (docs/run.md): the protocol, model-checked, the ring it runs on,
// the pool of rings and the hooks' paths through them.
#[cfg(not(all(test, loom)))]
mod resident;
mod resident_protocol;
#[cfg(not(all(test, loom)))]
mod ring_io;
mod ring_switch;
#[cfg(not(all(test, loom)))]
mod rings;
mod slot_protocol;
#[cfg(not(all(test, loom)))]
mod socket_options;
#[cfg(not(all(test, loom)))]
mod span_copy;
#[cfg(not(all(test, loom)))]
mod spill_hooks;
#[cfg(not(all(test, loom)))]
mod stats;
#[cfg(not(all(test, loom)))]
mod switch;
mod sync;
#[cfg(not(all(test, loom)))]
mod sys;
#[cfg(all(not(all(test, loom)), target_arch = "x86_64"))]
mod syscall_hook;
#[cfg(not(all(test, loom)))]
mod table;
#[cfg(not(all(test, loom)))]
mod wait_signals;
#[cfg(not(all(test, loom)))]
mod yield_gate;

/// Runs when the loader maps the library, before the program's `main`:
/// finds the real calls (`dlsym` may allocate, which is fine here and not in
/// a hook), notes which of 0, 1 and 2 are pipes, opens the statistics
/// file if `SHMPIPE_RUN_STATS` names one, and maps the hand-over arena and
/// the pool of rings unless `SHMPIPE_RUN_RINGS` turns them off (`switch`).
#[cfg(not(all(test, loom)))]
extern "C" fn init() {
    sys::resolve_all();
    spill_hooks::resolve();
    table::after_exec();
    stats::open_from_env();
    let mode = sys::keep_errno(switch::from_env);
    handover::open_from_env(mode);
    rings::open_from_env(mode);
    // `_exit`'s hook goes on to the real one whatever the mode (another
    // library's, if one wraps it).
    sys::resolve_exit();
    if rings::on() {
        // What a process holds at its end is counted out (`_exit`'s hook,
        // and this handler for `exit`).
        sys::at_exit(ring_io::before_exit);
    }
    #[cfg(target_arch = "x86_64")]
    syscall_hook::ready();
}

// The loader calls the pointers in `.init_array` once, single-threaded,
// before the program's `main`.
#[cfg(not(all(test, loom)))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
