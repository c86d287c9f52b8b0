//! Loom models of the slot protocol: the functions of the module above,
//! as the library runs them, with a model's slot and outside.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-preload --release --lib`.
//!
//! A deadline is a count of polls: `late` says yes from the k-th poll on,
//! for each k of a few, or only when the other side's own move ends the
//! wait (`NEVER`); loom puts that poll at every point of the other
//! threads' runs. The kernel pipe is one flag: a writer that did not hand
//! over writes there, a reader's `late` sees it (as `FIONREAD` does), and
//! a writer's `holding` fails while it is set (rule R2). The slot's buffer
//! is a loom cell, so a take that could overlap a fill, or not see all of
//! it, fails the model as a data race.

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;

use super::*;
use crate::loom_check::check;

/// The pipe every model's reader and writers use.
const INO: u64 = 7;
/// What a reader asks for; the writes are smaller.
const REQUEST: usize = 4;
/// Two inodes this far apart share a slot (`arena::SLOTS`).
const SLOTS_APART: u64 = 64;
/// A process that is gone (`alive` says no); every other but 0 lives.
const DEAD: u32 = 9;
/// A deadline that never comes: only the other side ends the wait.
const NEVER: usize = usize::MAX;
const FIRST: &[u8] = &[1, 2];
const SECOND: &[u8] = &[3, 4, 5];

/// How a deadline reads in a model's name.
fn poll(late_at: usize) -> String {
    match late_at {
        NEVER => "never late".into(),
        k => format!("late at poll {k}"),
    }
}

/// A slot and the kernel pipe beside it.
struct Model {
    state: AtomicU64,
    ino: AtomicU64,
    request: AtomicU64,
    len: AtomicU64,
    reader: AtomicU32,
    buf: UnsafeCell<[u8; REQUEST]>,
    kernel: AtomicBool,
}

// SAFETY: the buffer is shared between threads as the arena's is between
// processes; loom checks every access to it.
unsafe impl Sync for Model {}

impl Model {
    /// A fresh slot (all zeros, as a new arena's).
    fn idle() -> Arc<Self> {
        Self::left(0, 0)
    }

    /// A slot left in state `state` by a reader `reader` of `INO` that
    /// asked for `REQUEST` bytes, with `REQUEST` bytes of garbage filled.
    fn left(state: u64, reader: u32) -> Arc<Self> {
        Arc::new(Self {
            state: AtomicU64::new(state),
            ino: AtomicU64::new(if reader == 0 { 0 } else { INO }),
            request: AtomicU64::new(if reader == 0 { 0 } else { REQUEST as u64 }),
            len: AtomicU64::new(if reader == 0 { 0 } else { REQUEST as u64 }),
            reader: AtomicU32::new(reader),
            buf: UnsafeCell::new([0xee; REQUEST]),
            kernel: AtomicBool::new(false),
        })
    }

    /// Asserts that the slot ends free for the next announcement.
    fn assert_idle(&self) {
        let s = self.state.load(Ordering::SeqCst);
        assert_eq!(phase(s), IDLE, "slot left busy: phase {}", phase(s));
        assert_eq!(pid_of(s), 0, "an IDLE slot names no process");
    }
}

impl Words for Model {
    fn state(&self) -> &AtomicU64 {
        &self.state
    }
    fn ino(&self) -> &AtomicU64 {
        &self.ino
    }
    fn request(&self) -> &AtomicU64 {
        &self.request
    }
    fn len(&self) -> &AtomicU64 {
        &self.len
    }
    fn reader(&self) -> &AtomicU32 {
        &self.reader
    }
}

struct ModelReader<'a> {
    slot: &'a Model,
    late_at: usize,
    polls: usize,
    got: Vec<u8>,
}

impl Reader for ModelReader<'_> {
    fn alive(&self, pid: u32) -> bool {
        pid != 0 && pid != DEAD
    }
    fn announcing(&mut self) {}
    fn waiting(&mut self) {}
    fn late(&mut self) -> bool {
        self.polls += 1;
        self.polls >= self.late_at || self.slot.kernel.load(Ordering::SeqCst)
    }
    fn pause(&mut self) {
        thread::yield_now();
    }
    unsafe fn take(&mut self, len: usize) {
        // SAFETY: `len <= REQUEST` (the caller's contract); loom checks
        // that no fill races with this read.
        self.got = self.slot.buf.with(|b| unsafe { (&*b)[..len].to_vec() });
    }
}

/// One `read` of reader `pid` of pipe `INO` that waits: the bytes handed
/// to it.
fn read(slot: &Model, pid: u32, late_at: usize) -> Vec<u8> {
    read_pipe(slot, INO, pid, late_at)
}

/// One `read` of reader `pid` of pipe `ino` that waits.
fn read_pipe(slot: &Model, ino: u64, pid: u32, late_at: usize) -> Vec<u8> {
    let mut side = ModelReader {
        slot,
        late_at,
        polls: 0,
        got: Vec::new(),
    };
    let n = wait_for_writer(slot, ino, pid, REQUEST, &mut side);
    assert_eq!(n, side.got.len(), "the count returned is the bytes taken");
    side.got
}

/// Where a writer's hand-over fails on its own, if it does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fails {
    No,
    /// `holding`: the descriptor checks say no.
    Holding,
    /// `fill`: the caller's buffer cannot be read.
    Fill,
}

struct ModelWriter<'a> {
    slot: &'a Model,
    pid: u32,
    bytes: &'static [u8],
    late_at: usize,
    polls: usize,
    fails: Fails,
}

impl Writer for ModelWriter<'_> {
    fn pid(&mut self) -> u32 {
        self.pid
    }
    fn holding(&mut self) -> bool {
        self.fails != Fails::Holding && !self.slot.kernel.load(Ordering::SeqCst)
    }
    unsafe fn fill(&mut self, me: u32) -> bool {
        assert_eq!(me, self.pid);
        if self.fails == Fails::Fill {
            return false;
        }
        let bytes = self.bytes;
        // SAFETY: the writes are at most REQUEST bytes; loom checks that
        // no take races with this write.
        self.slot
            .buf
            .with_mut(|b| unsafe { (&mut *b)[..bytes.len()].copy_from_slice(bytes) });
        true
    }
    fn filled(&mut self) {}
    fn late(&mut self) -> bool {
        self.polls += 1;
        self.polls >= self.late_at
    }
    fn pause(&mut self) {
        thread::yield_now();
    }
}

/// One `write` of `bytes` by writer `pid`: handed over, or (nothing of it
/// delivered) written to the kernel pipe. Whether it was handed over.
fn write(slot: &Model, pid: u32, bytes: &'static [u8], late_at: usize, fails: Fails) -> bool {
    let mut side = ModelWriter {
        slot,
        pid,
        bytes,
        late_at,
        polls: 0,
        fails,
    };
    let handed = hand_over(slot, INO, bytes.len(), &mut side);
    if !handed {
        slot.kernel.store(true, Ordering::SeqCst);
    }
    handed
}

/// Asserts that the write of `bytes` reached exactly one of the reads
/// `got`, whole, if it was handed over, and none of them if not.
fn assert_once(handed: bool, bytes: &[u8], got: &[&[u8]]) {
    let whole = got.iter().filter(|g| *g == &bytes).count();
    if handed {
        assert_eq!(whole, 1, "handed over, yet taken {whole} times: {got:?}");
    } else {
        assert_eq!(whole, 0, "taken back, yet delivered: {got:?}");
    }
}

/// One reader, one writer, either giving up at any poll, the writer's
/// checks or copy failing: the write is delivered exactly once, whole (by
/// the hand-over, or by the kernel after the writer took it back), and
/// the slot ends IDLE.
#[test]
fn a_write_is_handed_over_or_left_to_the_kernel_exactly_once() {
    for reader_late in [1, 2, 3, NEVER] {
        for writer_late in [1, 2, NEVER] {
            for fails in [Fails::No, Fails::Holding, Fails::Fill] {
                let what = format!(
                    "one reader ({}), one writer ({}, fails: {fails:?})",
                    poll(reader_late),
                    poll(writer_late)
                );
                check(&what, None, move || {
                    let slot = Model::idle();
                    let other = slot.clone();
                    let writer = thread::spawn(move || write(&other, 2, FIRST, writer_late, fails));
                    let got = read(&slot, 1, reader_late);
                    let handed = writer.join().unwrap();
                    assert_once(handed, FIRST, &[&got]);
                    assert!(got.is_empty() || got == FIRST, "torn: {got:?}");
                    assert!(fails == Fails::No || !handed);
                    slot.assert_idle();
                });
            }
        }
    }
}

/// Two writers race for one waiting reader: at most one hands over to a
/// read, the reader gets its bytes whole, the other's go to the kernel,
/// and the slot ends IDLE. A reader that got nothing waits once more, so
/// a writer still filling the buffer of a read that gave up meets the
/// next read's writer.
#[test]
fn of_two_writers_at_most_one_hands_over() {
    for reader_late in [1, 2, NEVER] {
        for writer_late in [1, NEVER] {
            let what = format!(
                "one reader ({}), two writers ({})",
                poll(reader_late),
                poll(writer_late)
            );
            check(&what, Some(2), move || {
                let slot = Model::idle();
                let (a, b) = (slot.clone(), slot.clone());
                let first = thread::spawn(move || write(&a, 2, FIRST, writer_late, Fails::No));
                let second = thread::spawn(move || write(&b, 3, SECOND, writer_late, Fails::No));
                let got = read(&slot, 1, reader_late);
                let again = if got.is_empty() {
                    read(&slot, 1, reader_late)
                } else {
                    Vec::new()
                };
                let (one, two) = (first.join().unwrap(), second.join().unwrap());
                assert_once(one, FIRST, &[&got, &again]);
                assert_once(two, SECOND, &[&got, &again]);
                for g in [&got, &again] {
                    assert!(g.is_empty() || g == FIRST || g == SECOND, "torn: {g:?}");
                }
                slot.assert_idle();
            });
        }
    }
}

/// A slot left busy by a process that is gone (in each phase it can be
/// left in), two readers that find it so (one frees it, either may then
/// announce) and a writer: the dead process's bytes reach nobody, the
/// writer's reach one reader or none, and the slot ends IDLE.
#[test]
fn a_dead_processs_slot_is_freed_without_losing_a_hand_over() {
    for left in [ANNOUNCING, WAITING, CLAIMED, FILLED, TAKING, ABANDONED] {
        let what =
            format!("a slot left in phase {left} by a dead process, two readers, one writer");
        check(&what, Some(2), move || {
            // The dead process is the reader, and for CLAIMED, FILLED and
            // ABANDONED the writer too (a FILLED slot is stale only when
            // both are gone).
            let slot = Model::left(word(5, DEAD, left), DEAD);
            let (r, w) = (slot.clone(), slot.clone());
            let other = thread::spawn(move || read(&r, 3, 2));
            let writer = thread::spawn(move || write(&w, 2, FIRST, 2, Fails::No));
            let mut got = read(&slot, 1, 2);
            if got.is_empty() {
                got = read(&slot, 1, 2);
            }
            let (got_other, handed) = (other.join().unwrap(), writer.join().unwrap());
            assert_once(handed, FIRST, &[&got, &got_other]);
            for g in [&got, &got_other] {
                assert!(g.is_empty() || g == FIRST, "not the writer's: {g:?}");
            }
            slot.assert_idle();
        });
    }
}

/// Pipes whose inodes share a slot: a writer whose pipe's reader waited
/// there before never hands over to a reader of another pipe waiting now
/// (it reads the inode the announcement published with WAITING).
#[test]
fn a_writer_hands_over_only_to_a_reader_of_its_pipe() {
    check("a reader of another pipe in the slot", None, || {
        const OTHER: u64 = INO + SLOTS_APART;
        // Left IDLE by a reader of INO.
        let slot = Model::left(word(5, 0, IDLE), 1);
        let other = slot.clone();
        let writer = thread::spawn(move || write(&other, 2, FIRST, NEVER, Fails::No));
        let got = read_pipe(&slot, OTHER, 3, 2);
        let handed = writer.join().unwrap();
        assert!(!handed && got.is_empty(), "handed to another pipe: {got:?}");
        slot.assert_idle();
    });
}

/// A slot used again: two readers each wait once while one writer writes
/// twice. Each write reaches one read or none, whole; a read's copy never
/// overlaps the next hand-over's fill, whichever reader announces next.
#[test]
fn a_slot_used_again_delivers_each_write_once() {
    for late in [1, 2] {
        let what = format!("two readers, one writer writing twice ({})", poll(late));
        check(&what, Some(2), move || {
            let slot = Model::idle();
            let (r, w) = (slot.clone(), slot.clone());
            let other = thread::spawn(move || read(&r, 3, late));
            let writer = thread::spawn(move || {
                let one = write(&w, 2, FIRST, late, Fails::No);
                // The reader reads the kernel's bytes (as it would).
                w.kernel.store(false, Ordering::SeqCst);
                (one, write(&w, 2, SECOND, late, Fails::No))
            });
            let got = read(&slot, 1, late);
            let (got_other, (one, two)) = (other.join().unwrap(), writer.join().unwrap());
            assert_once(one, FIRST, &[&got, &got_other]);
            assert_once(two, SECOND, &[&got, &got_other]);
            for g in [&got, &got_other] {
                assert!(g.is_empty() || g == FIRST || g == SECOND, "torn: {g:?}");
            }
            slot.assert_idle();
        });
    }
}
