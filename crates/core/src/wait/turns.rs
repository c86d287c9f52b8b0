//! What this thread did last, as the waits and publishes of all its ends
//! see it: whether it published from a writing end since it last waited
//! (then its next publish is one of a stream's), and whether it waited as
//! a reader since it last published (then that publish is likely a reply,
//! which the peer waits for, and keeps the inline copy on the CPUs where
//! that wins: see `learn_reply_copies`). Per thread, not per end: a request and its
//! reply go through different ends.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

/// `FLAGS`: this thread waited as a reader since its last publish from a
/// writing end; then that publish is likely a reply, or a request after
/// one, which the peer waits for, and it keeps the inline copy beside the
/// tail (see `End::publish`). Set only where replies carry that copy (see
/// [`learn_reply_copies`]). Never with `SENT`.
const READ_WAITED: u8 = 1;
/// `FLAGS`: `SENT_MIRROR` holds a flag (see `mirror_sent`). Only with
/// `SENT`: a wait takes the mirror back as it clears `SENT`.
const MIRRORED: u8 = 2;

thread_local! {
    /// Whether this thread published from a writing end since its last
    /// wait (see `note_wait`); checked on every publish (one compare with
    /// memory: alone in its cell, so that no use of the other flags holds
    /// it in a register), stored only when it changes.
    static SENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// `READ_WAITED` and `MIRRORED` in one cell: a wait loads and stores
    /// it once, and takes the mirror back only if there is one.
    static FLAGS: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
    /// Bumped each time `SENT` goes up: an end that remembers the value at
    /// its last wait can tell whether this thread sent since.
    static SEND_EPOCH: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// A flag outside this crate that mirrors `SENT` (see `mirror_sent`).
    static SENT_MIRROR: std::cell::Cell<Option<&'static AtomicU32>> =
        const { std::cell::Cell::new(None) };
}

/// Makes `flag` say whether this thread published from a writing end since
/// its last wait (1 or 0), and keeps it so until then: this thread's next
/// wait clears it, as does mirroring another flag. The C API's inline
/// write path publishes without this crate while its writer's flag is 1,
/// which is when a publish here would note nothing new.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU32, Ordering};
/// static FLAG: AtomicU32 = AtomicU32::new(0);
/// shmpipe::mirror_sent(&FLAG);
/// assert_eq!(FLAG.load(Ordering::Relaxed), 0); // nothing sent yet
/// ```
#[doc(hidden)]
pub fn mirror_sent(flag: &'static AtomicU32) {
    if let Some(old) = SENT_MIRROR.with(|m| m.take()) {
        old.store(0, Ordering::Relaxed);
    }
    let flags = FLAGS.with(|f| f.get());
    if sent() {
        flag.store(1, Ordering::Relaxed);
        SENT_MIRROR.with(|m| m.set(Some(flag)));
        FLAGS.with(|f| f.set(flags | MIRRORED));
    } else {
        flag.store(0, Ordering::Relaxed);
        FLAGS.with(|f| f.set(flags & !MIRRORED));
    }
}

/// Whether this thread published from a writing end since its last wait:
/// then its next publish is one of a stream's. While this holds,
/// `read_waited` does not.
#[inline(always)]
pub(super) fn sent() -> bool {
    SENT.with(|s| s.get())
}

/// Whether this thread waited as a reader since its last publish from a
/// writing end, on a CPU where replies carry the inline copy (see
/// [`learn_reply_copies`]): then its next publish is likely a reply, or a
/// request after one, which the peer waits for, and keeps the copy.
#[inline(always)]
pub(super) fn read_waited() -> bool {
    FLAGS.with(|f| f.get()) & READ_WAITED != 0
}

/// Notes the first publish from a writing end since this thread last
/// waited (the caller saw `!sent()`, so nothing is mirrored either).
///
/// Not `#[inline]`, nor is `note_wait`: the ends' inline paths would carry
/// them into other crates, where these thread-locals cost more to reach
/// (roundtrip-8B took 6 more instructions).
pub(super) fn note_first_send() {
    debug_assert!(!sent());
    SENT.with(|s| s.set(true));
    FLAGS.with(|f| f.set(0));
    SEND_EPOCH.with(|e| e.set(e.get().wrapping_add(1)));
}

/// This thread's send epoch (see `SEND_EPOCH`).
#[inline(always)]
pub(super) fn send_epoch() -> u64 {
    SEND_EPOCH.with(|e| e.get())
}

/// What a reader's wait puts in `FLAGS`: `READ_WAITED` where replies
/// carry the inline copy beside the tail, 0 elsewhere (see
/// [`learn_reply_copies`]). A process-wide answer in a static, set as
/// each end is made, so that a wait pays one load for it and no test.
static REPLY_COPIES: AtomicU8 = AtomicU8::new(0);

/// Learns whether a reply also goes into the inline copy beside the tail:
/// on Intel, not elsewhere, as measured on each. Where lines move slowly
/// (the Intel Xeon guest: 140 ns each way) the copy spares a waiting
/// reader its second transfer, that of the data line after the tail's:
/// cross-core roundtrip-8B 262-298 ns with it against 340-391 without
/// (x/cl 0.94-1.09 against 1.26-1.34, three interleaved pairs). Where
/// lines move fast (AMD Zen 5: 100-109 ns without it against 125-130 with
/// it) the copy's stores to the line the reader polls cost more than the
/// transfer they spare; on Zen 3 and Zen 1 it did not win either
/// (docs/roundtrip.md, "The inline copy on Zen 5" and "The inline copy
/// on Intel"). The ring's protocol is the same either way: a reader takes
/// a copy where a writer made one. Called as each end is made, before
/// any wait on it.
pub(super) fn learn_reply_copies() {
    let copies = shmpipe_ring::cpu::this().vendor == shmpipe_ring::cpu::Vendor::Intel;
    REPLY_COPIES.store(if copies { READ_WAITED } else { 0 }, Ordering::Relaxed);
}

/// Notes that this thread waits (as a reader, if `reader`), and returns
/// its send epoch.
pub(super) fn note_wait(reader: bool) -> u64 {
    SENT.with(|s| s.set(false));
    let flags = FLAGS.with(|f| f.get());
    if flags & MIRRORED != 0 {
        unmirror();
    }
    // `MIRRORED` down; `READ_WAITED` up for a reader, kept for a writer.
    let kept = if reader {
        REPLY_COPIES.load(Ordering::Relaxed)
    } else {
        flags & READ_WAITED
    };
    FLAGS.with(|f| f.set(kept));
    SEND_EPOCH.with(|e| e.get())
}

/// A wait takes the mirror back (see `mirror_sent`): its flag says 0.
#[cold]
#[inline(never)]
fn unmirror() {
    if let Some(flag) = SENT_MIRROR.with(|m| m.take()) {
        flag.store(0, Ordering::Relaxed);
    }
}
