//! The hand-over's slot protocol (stage 2a of docs/run.md): the phases of
//! a slot's state word and every move between them, for the reader that
//! waits ([`wait_for_writer`]), the writer that hands over ([`hand_over`])
//! and a reader that frees a slot whose process is gone.
//!
//! No system call in here: what touches the kernel, the clock or the
//! program's memory (the deadlines, `FIONREAD`, the writer's descriptor
//! checks, the copies, whether a process exists, the pause between polls)
//! comes in through [`Reader`] and [`Writer`], which `handover`
//! implements, and the atomics come from `sync`. So the loom models in
//! `slot_protocol/loom_models.rs` run this very code, with deadlines that
//! expire at any poll: each write is delivered exactly once (handed over
//! and taken, or taken back and left to the kernel), a reader never
//! copies a buffer a writer is filling (nor a writer fills one a reader
//! still copies), of two writers at most one hands over, a writer hands
//! over only to a reader of its pipe, freeing a dead process's slot loses
//! or repeats no hand-over, and every slot ends IDLE. Run them with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-preload --release --lib`
//! (`scripts/verify-ring.sh` does).
//!
//! `handover` and `arena` (whose `Slot` holds the [`Words`]) use it; it
//! uses `sync` only.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

#[cfg(all(test, loom))]
mod loom_models;

/// The phases of a slot: the low byte of its state word. Above it, the
/// process that moved the slot into the phase (so that a slot left by a
/// process that is gone can be freed), and above that a sequence number,
/// one more at each announcement, so that a stale look cannot act on a
/// later hand-over.
const IDLE: u64 = 0;
const ANNOUNCING: u64 = 1;
const WAITING: u64 = 2;
const CLAIMED: u64 = 3;
const FILLED: u64 = 4;
const TAKING: u64 = 5;
/// The reader stopped waiting while a writer held the claim: the buffer is
/// still the writer's until it sees this and frees the slot.
const ABANDONED: u64 = 6;

fn word(seq: u64, pid: u32, phase: u64) -> u64 {
    ((seq & 0xff_ffff) << 40) | (u64::from(pid) << 8) | phase
}

fn phase(s: u64) -> u64 {
    s & 0xff
}

fn pid_of(s: u64) -> u32 {
    (s >> 8) as u32
}

fn seq(s: u64) -> u64 {
    s >> 40
}

/// The words of a slot the protocol moves (`arena::Slot`'s; a model's own
/// under loom).
pub trait Words {
    /// `seq << 40 | pid << 8 | phase`.
    fn state(&self) -> &AtomicU64;
    /// The inode of the pipe whose reader waits.
    fn ino(&self) -> &AtomicU64;
    /// How many bytes the waiting reader takes at most.
    fn request(&self) -> &AtomicU64;
    /// How many bytes the writer put in the buffer.
    fn len(&self) -> &AtomicU64;
    /// The waiting reader's process.
    fn reader(&self) -> &AtomicU32;
}

/// What a reader's wait needs from outside the slot.
pub trait Reader {
    /// Whether process `pid` exists (0 is none): a slot left busy by one
    /// that does not is freed.
    fn alive(&self, pid: u32) -> bool;
    /// The announcement's words are stored and WAITING is not published
    /// yet: a writer that sees WAITING sees what is stored here too.
    fn announcing(&mut self);
    /// WAITING is published: the wait begins.
    fn waiting(&mut self);
    /// Asked at every poll: whether to stop waiting (the time is up, or
    /// the kernel pipe got bytes a writer that found no reader put there).
    fn late(&mut self) -> bool;
    /// Between two polls.
    fn pause(&mut self);
    /// Copies the first `len` bytes of the slot's buffer to the caller's.
    ///
    /// # Safety
    ///
    /// The buffer holds `len` bytes a writer completed, no writer touches
    /// it during the call (the reader holds TAKING), and `len` is at most
    /// the request.
    unsafe fn take(&mut self, len: usize);
}

/// What a writer's hand-over needs from outside the slot.
pub trait Writer {
    /// This process's id (asked only once a reader waits: it may cost a
    /// system call).
    fn pid(&mut self) -> u32;
    /// Asked with the claim held: whether the hand-over may go on (the
    /// descriptor is still the pipe's write end, and the kernel pipe is
    /// empty).
    fn holding(&mut self) -> bool;
    /// Copies the write into the slot's buffer: false if it could not (a
    /// buffer the kernel would refuse, for it to refuse).
    ///
    /// # Safety
    ///
    /// The caller holds the claim: no reader reads the buffer, no other
    /// writer writes it, until FILLED.
    unsafe fn fill(&mut self, me: u32) -> bool;
    /// FILLED is published: the wait for the reader's take begins.
    fn filled(&mut self);
    /// Asked at every poll: whether to stop waiting for the take.
    fn late(&mut self) -> bool;
    /// Between two polls.
    fn pause(&mut self);
}

/// A slot left busy by a process that is gone is made IDLE again. A
/// FILLED one is left to its writer, which takes its bytes back for the
/// kernel to carry (another reader may want them), and to its reader,
/// which takes them, until both are gone.
fn reset_if_stale<S: Words>(slot: &S, s: u64, alive: impl Fn(u32) -> bool) {
    let stale = match phase(s) {
        IDLE => false,
        FILLED => !alive(pid_of(s)) && !alive(slot.reader().load(Ordering::Relaxed)),
        _ => !alive(pid_of(s)),
    };
    if stale {
        let _ = slot.state().compare_exchange(
            s,
            word(seq(s), 0, IDLE),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// Announces reader `me` of the pipe of `ino` in `slot`, asking for at
/// most `request` bytes (no more than the slot's buffer holds), and waits
/// for a writer: the bytes taken (`side` copied them), or 0 if none came
/// in time, the kernel pipe got bytes meanwhile, the slot was busy, or
/// the writer gave up.
pub fn wait_for_writer<S: Words, R: Reader>(
    slot: &S,
    ino: u64,
    me: u32,
    request: usize,
    side: &mut R,
) -> usize {
    let state = slot.state();
    let s = state.load(Ordering::Acquire);
    if phase(s) != IDLE {
        reset_if_stale(slot, s, |pid| side.alive(pid));
        return 0;
    }
    let my = (seq(s) + 1) & 0xff_ffff;
    if state
        .compare_exchange(
            s,
            word(my, me, ANNOUNCING),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_err()
    {
        return 0;
    }
    slot.ino().store(ino, Ordering::Relaxed);
    slot.request().store(request as u64, Ordering::Relaxed);
    slot.reader().store(me, Ordering::Relaxed);
    side.announcing();
    // SYNC POINT: pairs with the writer's Acquire load in `hand_over`: the
    // inode and request it reads are this announcement's.
    state.store(word(my, me, WAITING), Ordering::Release);
    side.waiting();
    loop {
        let s = state.load(Ordering::Acquire);
        if seq(s) != my {
            return 0; // cannot happen while this announcement stands
        }
        let late = side.late();
        match phase(s) {
            FILLED => {
                // SYNC POINT: Acquire pairs with the writer's Release
                // store of FILLED: the buffer and length are complete.
                if state
                    .compare_exchange(
                        s,
                        word(my, me, TAKING),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    let len = (slot.len().load(Ordering::Relaxed) as usize).min(request);
                    // SAFETY: the buffer holds `len` bytes the writer wrote
                    // before FILLED, no writer touches it until IDLE, and
                    // `len` is at most the request.
                    unsafe { side.take(len) };
                    // The writer went on when it saw TAKING; the slot is
                    // free for the next announcement. A compare-exchange,
                    // not a store: if `reset_if_stale` took this reader
                    // for dead (a pid `kill(pid, 0)` misjudges, as in
                    // another pid namespace), a newer announcement may
                    // stand, and must not be wiped.
                    let _ = state.compare_exchange(
                        word(my, me, TAKING),
                        word(my, 0, IDLE),
                        Ordering::Release,
                        Ordering::Relaxed,
                    );
                    return len;
                }
            }
            WAITING if late => {
                if state
                    .compare_exchange(s, word(my, 0, IDLE), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                {
                    return 0;
                }
            }
            CLAIMED if late => {
                // The writer may be copying into the buffer: it stays the
                // writer's, which frees the slot when it sees this.
                if state
                    .compare_exchange(
                        s,
                        word(my, pid_of(s), ABANDONED),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return 0;
                }
            }
            WAITING | CLAIMED => {}
            // IDLE: the writer gave up (the kernel pipe has bytes).
            _ => return 0,
        }
        side.pause();
    }
}

/// Hands `n` bytes to a reader of `ino` waiting in `slot`: whether it took
/// them (if not, nothing of them was delivered).
pub fn hand_over<S: Words, W: Writer>(slot: &S, ino: u64, n: usize, side: &mut W) -> bool {
    let state = slot.state();
    // SYNC POINT: pairs with the reader's Release store of WAITING.
    let s = state.load(Ordering::Acquire);
    if phase(s) != WAITING
        || slot.ino().load(Ordering::Relaxed) != ino
        || slot.request().load(Ordering::Relaxed) < n as u64
    {
        return false;
    }
    let (my, me) = (seq(s), side.pid());
    let claimed = word(my, me, CLAIMED);
    if state
        .compare_exchange(s, claimed, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    if !side.holding() {
        give_up(slot, claimed, my);
        return false;
    }
    // SAFETY: the claim gives this writer the slot's buffer until FILLED
    // (or until it frees an ABANDONED slot).
    if !unsafe { side.fill(me) } {
        give_up(slot, claimed, my);
        return false;
    }
    slot.len().store(n as u64, Ordering::Relaxed);
    let filled = word(my, me, FILLED);
    // SYNC POINT: Release pairs with the reader's Acquire in its take.
    if state
        .compare_exchange(claimed, filled, Ordering::Release, Ordering::Relaxed)
        .is_err()
    {
        // The reader stopped waiting: nothing was delivered.
        give_up(slot, claimed, my);
        return false;
    }
    side.filled();
    loop {
        if state.load(Ordering::Acquire) != filled {
            // TAKING, or IDLE after it: only the reader moves on from FILLED.
            return true;
        }
        if side.late() {
            // Not taken in time (the reader was killed, stopped or is not
            // running): take them back, for the kernel to carry.
            return state
                .compare_exchange(
                    filled,
                    word(my, 0, IDLE),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err();
        }
        side.pause();
    }
}

/// Frees a slot this writer claimed and will not fill: from CLAIMED (the
/// reader, finding IDLE, asks the kernel) or from ABANDONED (the reader
/// has gone already).
fn give_up<S: Words>(slot: &S, claimed: u64, my: u64) {
    let abandoned = (claimed & !0xff) | ABANDONED;
    for from in [claimed, abandoned] {
        if slot
            .state()
            .compare_exchange(
                from,
                word(my, 0, IDLE),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            return;
        }
    }
}
