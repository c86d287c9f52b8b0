//! A hostile-peer script: any byte string is read as a sequence of actions by
//! a misbehaving peer (overwrite an index, a parked word, a header field,
//! data bytes; re-attach an end) interleaved with calls on the ring's ends.
//!
//! Shared by `tests/hostile.rs` (seeded random scripts, on stable and under
//! Miri) and the `hostile_peer` fuzz target (`fuzz/`), so both run the same
//! checks:
//!
//! - every call on an end returns normally, with data or a
//!   [`ProtocolError`]: no panic (the script keeps to each method's
//!   documented caller preconditions, which depend only on the end's own
//!   cached state), no out-of-bounds access (ASan in the fuzzer, Miri here,
//!   and explicit checks on the raw ranges and slices the ends hand out);
//! - the cached views stay in range (`available_cached`, `free_cached` at
//!   most the capacity; a message fits in what is available);
//! - while the peer has done nothing hostile yet, a model of the honest ring
//!   predicts every result exactly: the bytes and messages read, the free
//!   and available counts, and whether `publish` asks for a wake-up.
//!
//! The first byte picks the capacity (bits 1-3: 8 to 512 bytes), whether a
//! scribbler thread overwrites control fields concurrently while the script
//! runs (bit 0), and whether the script's peer actions are skipped (bit 4),
//! to check long honest runs against the model.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};

use shmpipe_ring::frame::{self, HEADER};
use shmpipe_ring::layout::{Role, MAGIC, VERSION};
use shmpipe_ring::local::{hostile, Field, Hostile, Scribbler};
use shmpipe_ring::ProtocolError;

/// Runs the script `input`. Panics if the ring misbehaves.
pub fn run(input: &[u8]) {
    let mut inp = Input {
        data: input,
        pos: 0,
    };
    let mode = inp.u8();
    let capacity = 8usize << ((mode >> 1) % 7);
    let honest = mode & 0x10 != 0;
    let h = hostile(capacity).expect("a fresh ring attaches");
    if mode & 1 == 0 {
        Runner::new(h, inp, false, honest).run();
        return;
    }
    // Concurrent mode: a scribbler overwrites control fields while the
    // script runs; the model is off, the invariants stay on.
    let stop = AtomicBool::new(false);
    let scribbler = h.scribbler();
    let seed = input.iter().fold(0x9e37_79b9_7f4a_7c15u64, |s, &b| {
        (s ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    std::thread::scope(|s| {
        let t = s.spawn(|| scribble(&scribbler, capacity as u64, seed, &stop));
        Runner::new(h, inp, true, honest).run();
        stop.store(true, Ordering::Relaxed);
        // Join explicitly: that waits for the thread to exit (thread-local
        // destructors included), where the end of the scope only waits for
        // the closure; LeakSanitizer would otherwise report its leftovers.
        t.join().unwrap();
    });
}

/// Overwrites random control fields of both blocks until told to stop (or
/// a bounded number of times, to keep Miri runs short).
fn scribble(s: &Scribbler, capacity: u64, seed: u64, stop: &AtomicBool) {
    let mut rng = seed | 1;
    let rounds = if cfg!(miri) { 50 } else { 5_000 };
    for _ in 0..rounds {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let block = if rng & 1 == 0 {
            Role::Writer
        } else {
            Role::Reader
        };
        let field = Field::ALL[(rng >> 1) as usize % Field::ALL.len()];
        let cur = s.load(block, field);
        let value = match (rng >> 8) % 6 {
            0 => cur.wrapping_add((rng >> 16) % (2 * capacity + 2)),
            1 => cur.wrapping_sub((rng >> 16) % (capacity + 2)),
            2 => rng >> 3,
            3 => 0,
            4 => u64::MAX,
            _ => cur ^ (1 << ((rng >> 16) % 64)),
        };
        s.store(block, field, value);
        std::thread::yield_now();
    }
}

/// The script's bytes; reads past the end give zeros.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A number in `0..=max`, small ones (and `max` itself) likelier.
    fn upto(&mut self, max: usize) -> usize {
        match self.u8() % 4 {
            0 => max,
            1 => usize::from(self.u8()).min(max),
            _ => usize::from(self.u16()) % (max + 1),
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

/// What an honest ring must do, tracked while the peer is honest.
///
/// Positions are free-running like the ring's. `bytes` holds what sits
/// between the consumer's head and the producer's tail (`None`: unknown,
/// such as frame padding); `scratch` what the producer wrote past its tail
/// but has not committed.
#[derive(Default)]
struct Model {
    p_tail: u64,
    p_pub: u64,
    c_head: u64,
    c_pub: u64,
    bytes: VecDeque<Option<u8>>,
    scratch: Vec<Option<u8>>,
    /// Messages pushed and not consumed: start position and payload length.
    frames: VecDeque<(u64, usize)>,
    /// Parked words and epochs, and the epoch each side last woke.
    c_parked: u64,
    c_epoch: u64,
    p_woke_c: u64,
    p_parked: u64,
    p_epoch: u64,
    c_woke_p: u64,
}

impl Model {
    fn commit(&mut self, n: usize) {
        self.bytes.extend(self.scratch.drain(..n));
        self.scratch.resize(self.scratch.len() + n, None);
        self.p_tail = self.p_tail.wrapping_add(n as u64);
    }

    fn consume(&mut self, n: usize) {
        self.bytes.drain(..n);
        self.c_head = self.c_head.wrapping_add(n as u64);
        // Drop messages that start behind the new head.
        while let Some(&(pos, _)) = self.frames.front() {
            if (pos.wrapping_sub(self.c_head) as i64) >= 0 {
                break;
            }
            self.frames.pop_front();
        }
    }

    fn check_bytes(&self, offset: usize, got: &[u8]) {
        for (i, (&g, want)) in got.iter().zip(self.bytes.range(offset..)).enumerate() {
            if let Some(w) = *want {
                assert_eq!(g, w, "byte {} past the head", offset + i);
            }
        }
    }
}

struct Runner<'a> {
    h: Hostile,
    inp: Input<'a>,
    cap: usize,
    /// Set once the peer did anything hostile: the model is off from then.
    tainted: bool,
    model: Model,
    /// The last message length `next_message` returned, if nothing was
    /// consumed since.
    message: Option<usize>,
    /// Skip the peer's actions (an honest run).
    honest: bool,
}

impl<'a> Runner<'a> {
    fn new(h: Hostile, inp: Input<'a>, tainted: bool, honest: bool) -> Self {
        let cap = h.capacity();
        let model = Model {
            scratch: vec![None; cap],
            ..Model::default()
        };
        Runner {
            h,
            inp,
            cap,
            tainted,
            model,
            message: None,
            honest,
        }
    }

    fn run(mut self) {
        let max_ops = if cfg!(miri) { 64 } else { 4096 };
        for _ in 0..max_ops {
            if self.inp.done() {
                break;
            }
            match self.inp.u8() % 25 {
                0..=3 if self.honest => {}
                0 => self.peer_store(),
                1 => self.peer_write_data(),
                2 => self.peer_write_header(),
                3 => self.peer_reattach(),
                4 | 5 => self.push(),
                6 => self.push_message(),
                7 => self.write_in_place(),
                8 => self.free(),
                9 | 10 => self.producer_publish(),
                11 => self.producer_park(),
                12 => self.available(),
                13 | 14 => self.next_message(),
                15 => self.peek(),
                16 => self.pop(),
                17 => self.consume(),
                18 | 19 => self.consumer_publish(),
                20 => self.consumer_park(),
                21 => self.ranges(),
                22 => {
                    // Publish honest data: a message, pushed and published.
                    self.push_message();
                    self.producer_publish();
                }
                23 => {
                    self.push();
                    self.producer_publish();
                }
                24 if self.inp.u8() % 2 == 0 => self.take_reply(),
                _ => self.cpu_hint(),
            }
            self.invariants();
        }
    }

    fn taint(&mut self) {
        self.tainted = true;
    }

    fn invariants(&mut self) {
        let cap = self.cap;
        if self.h.has_producer() {
            assert!(self.h.producer().free_cached() <= cap);
        }
        if self.h.has_consumer() {
            let avail = self.h.consumer().available_cached();
            assert!(avail <= cap);
            if let Some(len) = self.message {
                assert!(frame::frame_len(len) <= avail);
            }
        }
        if !self.tainted {
            let m = &self.model;
            let free = cap as u64 - m.p_tail.wrapping_sub(m.c_pub);
            let published = m.p_pub.wrapping_sub(m.c_head);
            assert!(self.h.producer().free_cached() as u64 <= free);
            assert!(self.h.consumer().available_cached() as u64 <= published);
            assert_eq!(m.bytes.len() as u64, m.p_tail.wrapping_sub(m.c_head));
        }
    }

    // ---- the hostile peer ----

    /// A value worth storing into `field` of `block`: near the current
    /// one, near the other index, a ring away, extreme, or random.
    fn value(&mut self, block: Role, field: Field) -> u64 {
        let cur = self.h.load(block, field);
        let cap = self.cap as u64;
        let other = self.h.load(
            if block == Role::Writer {
                Role::Reader
            } else {
                Role::Writer
            },
            Field::Index,
        );
        let small = u64::from(self.inp.u8());
        match self.inp.u8() % 14 {
            0 => cur.wrapping_add(1 + small % cap),
            1 => cur.wrapping_sub(1 + small % cap),
            2 => cur.wrapping_add(cap),
            3 => cur.wrapping_add(cap + 1 + small),
            4 => other.wrapping_add(small % (2 * cap + 2)),
            5 => other.wrapping_sub(small % (cap + 2)),
            6 => 0,
            7 => u64::MAX - small,
            8 => match field {
                Field::Magic => MAGIC,
                Field::Version => u64::from(VERSION),
                Field::Role => Role::Writer as u64,
                _ => cap,
            },
            9 => match field {
                Field::Role => Role::Reader as u64,
                Field::Capacity => cap << (1 + small % 3),
                _ => cur ^ (1 << (small % 64)),
            },
            10 => cap >> (1 + small % 3),
            11 => cur ^ (1 << (small % 64)),
            _ => self.inp.u64(),
        }
    }

    fn peer_store(&mut self) {
        let block = if self.inp.u8() & 1 == 0 {
            Role::Writer
        } else {
            Role::Reader
        };
        let field = Field::ALL[usize::from(self.inp.u8()) % Field::ALL.len()];
        let value = self.value(block, field);
        self.h.store(block, field, value);
        self.taint();
    }

    fn peer_write_data(&mut self) {
        let pos = u64::from(self.inp.u16());
        let n = self.inp.upto(self.cap);
        let bytes = self.inp.bytes(n);
        self.h.write_data(pos, &bytes);
        self.taint();
    }

    /// A message header at (or near) the consumer's head: a length that
    /// is too long, has the wrong check word, or is fine.
    fn peer_write_header(&mut self) {
        let head = self.h.load(Role::Reader, Field::Index);
        let pos = head.wrapping_add(u64::from(self.inp.u8() % 4) * HEADER as u64);
        let len = match self.inp.u8() % 5 {
            0 => (self.cap - HEADER) as u32,
            1 => (self.cap - HEADER + 1) as u32,
            2 => u32::MAX,
            3 => self.inp.u32(),
            _ => u32::from(self.inp.u8()) % self.cap as u32,
        };
        let check = if self.inp.u8() % 2 == 0 {
            !len
        } else {
            self.inp.u32()
        };
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..].copy_from_slice(&check.to_le_bytes());
        self.h.write_data(pos, &header);
        self.taint();
    }

    /// Re-attaches an end after perhaps corrupting a header field: the
    /// attach must succeed or fail with a ProtocolError.
    fn peer_reattach(&mut self) {
        if self.inp.u8() % 2 == 0 {
            let block = if self.inp.u8() & 1 == 0 {
                Role::Writer
            } else {
                Role::Reader
            };
            let field = Field::ALL[usize::from(self.inp.u8()) % 5]; // header fields
            let value = self.value(block, field);
            self.h.store(block, field, value);
        }
        let _: Result<(), ProtocolError> = if self.inp.u8() % 2 == 0 {
            self.h.attach_producer()
        } else {
            self.message = None;
            self.h.attach_consumer()
        };
        self.taint();
    }

    // ---- the producer ----

    fn push(&mut self) {
        if !self.h.has_producer() {
            return;
        }
        let free = self.h.producer().free_cached();
        let n = self.inp.upto(free);
        let src = self.inp.bytes(n);
        self.h.producer().push(&src);
        for (i, &b) in src.iter().enumerate() {
            self.model.scratch[i] = Some(b);
        }
        self.model.commit(n);
    }

    fn push_message(&mut self) {
        if !self.h.has_producer() {
            return;
        }
        let free = self.h.producer().free_cached();
        if free < HEADER {
            return;
        }
        // Largest payload whose frame fits.
        let max = (free - HEADER) / HEADER * HEADER;
        let len = self.inp.upto(max);
        let msg = self.inp.bytes(len);
        self.h.producer().push_message(&msg);
        let m = &mut self.model;
        m.frames.push_back((m.p_tail, len));
        for (i, &b) in frame::encode_header(len).iter().chain(&msg).enumerate() {
            m.scratch[i] = Some(b);
        }
        m.commit(frame::frame_len(len));
    }

    /// Writes through `slices_mut` and commits: a message (header by
    /// `write_message_header`, payload in place) or plain bytes.
    fn write_in_place(&mut self) {
        if !self.h.has_producer() {
            return;
        }
        let span = self.h.data_addresses();
        let free = self.h.producer().free_cached();
        let as_message = self.inp.u8() % 2 == 0;
        let (offset, len) = if as_message {
            if free < HEADER {
                return;
            }
            let len = self.inp.upto((free - HEADER) / HEADER * HEADER);
            self.h.producer().write_message_header(len);
            for (i, &b) in frame::encode_header(len).iter().enumerate() {
                self.model.scratch[i] = Some(b);
            }
            (HEADER, len)
        } else {
            let offset = self.inp.upto(free);
            (offset, self.inp.upto(free - offset))
        };
        let fill = self.inp.u8();
        {
            let mut p = self.h.producer();
            let (a, b) = p.slices_mut(offset, len);
            assert_eq!(a.len() + b.len(), len);
            assert!(b.is_empty() || b.as_ptr() as usize == span.start);
            for s in [&*a, &*b] {
                let start = s.as_ptr() as usize;
                assert!(s.is_empty() || (span.contains(&start) && start + s.len() <= span.end));
            }
            for (i, x) in a.iter_mut().chain(b.iter_mut()).enumerate() {
                *x = fill.wrapping_add(i as u8);
            }
        }
        for i in 0..len {
            self.model.scratch[offset + i] = Some(fill.wrapping_add(i as u8));
        }
        let n = if as_message {
            let n = frame::frame_len(len);
            self.model.frames.push_back((self.model.p_tail, len));
            n
        } else {
            self.inp.upto(offset + len)
        };
        self.h.producer().commit(n);
        self.model.commit(n);
    }

    fn free(&mut self) {
        if !self.h.has_producer() {
            return;
        }
        let want = self.inp.upto(self.cap + 1);
        let got = self.h.producer().free(want);
        if !self.tainted {
            let m = &self.model;
            let free = self.cap as u64 - m.p_tail.wrapping_sub(m.c_pub);
            let got = got.expect("an honest consumer is no protocol error") as u64;
            if got < want as u64 {
                assert_eq!(got, free, "free() reloaded the head");
            } else {
                assert!(got <= free);
            }
        }
    }

    fn producer_publish(&mut self) {
        if !self.h.has_producer() {
            return;
        }
        let wake = self.h.producer().publish();
        if self.tainted {
            return;
        }
        let m = &mut self.model;
        let want = m.p_tail != m.p_pub && m.c_parked != 0 && m.c_parked != m.p_woke_c;
        assert_eq!(
            wake, want,
            "producer publish asks for a wake-up iff the consumer parked anew"
        );
        if want {
            m.p_woke_c = m.c_parked;
        }
        m.p_pub = m.p_tail;
    }

    fn producer_park(&mut self) {
        if !self.h.has_producer() {
            return;
        }
        if self.inp.u8() % 3 == 0 {
            self.h.producer().unpark();
            self.model.p_parked = 0;
            return;
        }
        let want = self.inp.upto(self.cap);
        let r = self.h.producer().park(want);
        if self.tainted {
            return;
        }
        let m = &mut self.model;
        m.p_epoch = m.p_epoch.wrapping_add(1).max(1);
        let free = self.cap as u64 - m.p_tail.wrapping_sub(m.c_pub);
        let ready = r.expect("an honest consumer is no protocol error");
        assert_eq!(ready, free >= want as u64);
        m.p_parked = if ready { 0 } else { m.p_epoch };
    }

    // ---- the consumer ----

    fn available(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let want = self.inp.upto(self.cap + 1);
        let got = self.h.consumer().available(want);
        if !self.tainted {
            let m = &self.model;
            let published = m.p_pub.wrapping_sub(m.c_head);
            let got = got.expect("an honest producer is no protocol error") as u64;
            if got < want as u64 {
                assert_eq!(got, published, "available() reloaded the tail");
            } else {
                assert!(got <= published);
            }
        }
    }

    fn next_message(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let r = self.h.consumer().next_message();
        let avail = self.h.consumer().available_cached();
        if let Ok(Some(len)) = r {
            assert!(len <= frame::max_payload(self.cap));
            assert!(frame::frame_len(len) <= avail);
            self.message = Some(len);
        }
        if self.tainted {
            return;
        }
        let m = &self.model;
        let Some(&(pos, len)) = m.frames.front() else {
            return;
        };
        if pos != m.c_head {
            return; // bytes pushed as a stream sit at the head
        }
        match r {
            Ok(None) => assert_eq!(avail, 0),
            Ok(Some(got)) => {
                assert_eq!(got, len);
                let mut payload = vec![0u8; len];
                self.h.consumer().peek(HEADER, &mut payload);
                self.model.check_bytes(HEADER, &payload);
            }
            Err(ProtocolError::BadMessage { .. }) => {
                assert!(
                    avail > 0 && avail < frame::frame_len(len),
                    "a whole frame was readable"
                )
            }
            Err(e) => panic!("honest ring: {e}"),
        }
    }

    fn peek(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let avail = self.h.consumer().available_cached();
        let offset = self.inp.upto(avail);
        let mut dst = vec![0u8; self.inp.upto(avail - offset)];
        self.h.consumer().peek(offset, &mut dst);
        if !self.tainted {
            self.model.check_bytes(offset, &dst);
        }
    }

    fn pop(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let mut dst = vec![0u8; self.inp.upto(self.cap + 1)];
        let n = self.h.consumer().pop(&mut dst);
        assert!(n <= dst.len());
        self.message = None;
        if !self.tainted {
            self.model.check_bytes(0, &dst[..n]);
        }
        self.model_consume(n);
    }

    fn consume(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        if let Some(len) = self.message.take() {
            if self.inp.u8() % 2 == 0 {
                self.h.consumer().consume_message(len);
                self.model_consume(frame::frame_len(len));
                return;
            }
        }
        let n = self.inp.upto(self.h.consumer().available_cached());
        self.h.consumer().consume(n);
        self.model_consume(n);
    }

    /// A requester's read of its reply: all of `dst` at once, or nothing.
    fn take_reply(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let mut dst = vec![0u8; self.inp.upto(48)];
        let cached = self.h.consumer().available_cached();
        let r = self.h.consumer().take_reply(&mut dst);
        if r.is_some() {
            assert_eq!(cached, 0, "a reply taken with bytes cached");
            assert_eq!(self.h.consumer().available_cached(), 0);
            self.message = None;
        }
        if self.tainted {
            return;
        }
        let n = dst.len() as u64;
        let m = &mut self.model;
        let published = m.p_pub.wrapping_sub(m.c_head);
        let whole = cached == 0 && published == n && (1..=40).contains(&n) && n <= self.cap as u64;
        assert_eq!(
            r.is_some(),
            whole,
            "a reply is taken iff it is all there is"
        );
        let Some(wake) = r else {
            return;
        };
        m.check_bytes(0, &dst);
        m.consume(dst.len());
        let want = m.c_head != m.c_pub && m.p_parked != 0 && m.p_parked != m.c_woke_p;
        assert_eq!(
            wake, want,
            "a reply's publish asks for a wake-up iff the producer parked anew"
        );
        if want {
            m.c_woke_p = m.p_parked;
        }
        m.c_pub = m.c_head;
    }

    fn model_consume(&mut self, n: usize) {
        if !self.tainted {
            self.model.consume(n);
        }
    }

    fn consumer_publish(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let wake = self.h.consumer().publish();
        if self.tainted {
            return;
        }
        let m = &mut self.model;
        let want = m.c_head != m.c_pub && m.p_parked != 0 && m.p_parked != m.c_woke_p;
        assert_eq!(
            wake, want,
            "consumer publish asks for a wake-up iff the producer parked anew"
        );
        if want {
            m.c_woke_p = m.p_parked;
        }
        m.c_pub = m.c_head;
    }

    fn consumer_park(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        if self.inp.u8() % 3 == 0 {
            self.h.consumer().unpark();
            self.model.c_parked = 0;
            return;
        }
        let r = self.h.consumer().park();
        if self.tainted {
            return;
        }
        let m = &mut self.model;
        m.c_epoch = m.c_epoch.wrapping_add(1).max(1);
        let ready = r.expect("an honest producer is no protocol error");
        assert_eq!(ready, m.p_pub != m.c_head);
        m.c_parked = if ready { 0 } else { m.c_epoch };
    }

    /// Any CPU number from the peer is only a hint: it is handed back as is.
    fn cpu_hint(&mut self) {
        let cpu = self.inp.u32();
        if self.inp.u8() % 2 == 0 && self.h.has_producer() {
            let peer = self.h.load(Role::Reader, Field::Cpu) as u32;
            let got = self.h.producer().exchange_cpu_hint(cpu);
            if !self.tainted {
                // (A scribbler may change either word meanwhile.)
                assert_eq!(got, peer);
                assert_eq!(self.h.load(Role::Writer, Field::Cpu) as u32, cpu);
            }
        } else if self.h.has_consumer() {
            let _ = self.h.consumer().exchange_cpu_hint(cpu);
        }
    }

    /// The raw ranges must lie inside the data area, split at its end.
    fn ranges(&mut self) {
        if !self.h.has_consumer() {
            return;
        }
        let span = self.h.data_addresses();
        let avail = self.h.consumer().available_cached();
        let offset = self.inp.upto(avail);
        let len = self.inp.upto(avail - offset);
        let [(a, alen), (b, blen)] = self.h.consumer().ranges(offset, len);
        assert_eq!(alen + blen, len);
        let a = a as usize;
        assert!(span.contains(&a) && a + alen <= span.end);
        assert_eq!(b as usize, span.start);
        assert!(
            blen == 0 || a + alen == span.end,
            "the first range runs to the end"
        );
        assert!(blen <= span.len());
    }
}
