//! A shmpipe end attached to memory a hostile peer controls, driven by
//! libFuzzer.
//!
//! Each input is a program. Its first byte picks the victim (a `Reader`,
//! `Receiver`, `Writer` or `Sender`), the ring size and whether the peer's
//! header is corrupted before attach. The harness builds the victim's own
//! region honestly and the peer's region itself (a memfd it keeps mapped
//! writable), hands the end over with `recv_from` exactly as another
//! process would, and then interleaves the peer's writes (indices, parked
//! words, header fields, message headers, data bytes, wake bytes, hang-up)
//! with the victim's calls, all non-blocking.
//!
//! The victim may only return data, `WouldBlock`, EOF/`BrokenPipe`, or
//! `InvalidData` (and `InvalidInput` for a too-small receive buffer); any
//! other result, a panic, or an out-of-bounds access (AddressSanitizer, on
//! by default in cargo-fuzz) is a finding.
//!
//! ```text
//! cd crates/shmpipe && cargo +nightly fuzz run hostile_end -- -max_total_time=60
//! ```

#![no_main]

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use libfuzzer_sys::fuzz_target;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use shmpipe_ring::layout::{offset, Role, DATA_OFFSET, MAGIC, READER_REGION_LEN, VERSION};

/// A memfd with a writable shared mapping, sealed against resizing only.
struct Region {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

impl Region {
    fn new(len: usize, role: Role, capacity: u64) -> Region {
        let fd = rustix::fs::memfd_create("fuzz", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .unwrap();
        rustix::fs::ftruncate(&fd, len as u64).unwrap();
        // SAFETY: a fresh shared mapping, unmapped exactly in Drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .unwrap()
        .cast::<u8>();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .unwrap();
        let r = Region { fd, ptr, len };
        r.u64(offset::MAGIC).store(MAGIC, Ordering::Relaxed);
        r.u32(offset::VERSION).store(VERSION, Ordering::Relaxed);
        r.u32(offset::ROLE).store(role as u32, Ordering::Relaxed);
        r.u64(offset::CAPACITY).store(capacity, Ordering::Relaxed);
        r
    }

    fn u64(&self, off: usize) -> &AtomicU64 {
        let off = off.min(self.len - 8) & !7;
        // SAFETY: in bounds and aligned (clamped above); the mapping lives
        // as long as `self`; all accesses to it here are atomic.
        unsafe { AtomicU64::from_ptr(self.ptr.add(off).cast()) }
    }

    fn u32(&self, off: usize) -> &AtomicU32 {
        let off = off.min(self.len - 4) & !3;
        // SAFETY: as in `u64`.
        unsafe { AtomicU32::from_ptr(self.ptr.add(off).cast()) }
    }

    fn u8(&self, off: usize) -> &AtomicU8 {
        let off = off.min(self.len - 1);
        // SAFETY: as in `u64`.
        unsafe { AtomicU8::from_ptr(self.ptr.add(off)) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`.
        let _ = unsafe { rustix::mm::munmap(self.ptr.cast(), self.len) };
    }
}

/// Reads the input as a little program.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte().unwrap_or(0), self.byte().unwrap_or(0)])
    }
    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        for x in &mut b {
            *x = self.byte().unwrap_or(0);
        }
        u64::from_le_bytes(b)
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, rest) = self.0.split_at(n);
        self.0 = rest;
        a
    }
}

#[derive(Debug)]
enum Victim {
    Reader(shmpipe::Reader),
    Receiver(shmpipe::Receiver),
    Writer(shmpipe::Writer),
    Sender(shmpipe::Sender),
}

/// Hands an end over as another process would (`send_over`'s format for
/// an end a handshake made: a one-byte kind tag with four descriptors, the
/// two regions and the wake socket twice).
fn hand_over(kind: u8, own: &Region, peer: &Region, sock: &OwnedFd) -> std::io::Result<Victim> {
    let (a, b) = UnixStream::pair().unwrap();
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [own.fd.as_fd(), peer.fd.as_fd(), sock.as_fd(), sock.as_fd()];
    assert!(control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &a,
        &[std::io::IoSlice::new(&[kind])],
        &mut control,
        rustix::net::SendFlags::empty(),
    )
    .unwrap();
    Ok(match kind {
        b'r' => Victim::Reader(shmpipe::Reader::recv_from(&b)?),
        b'R' => Victim::Receiver(shmpipe::Receiver::recv_from(&b)?),
        b'w' => Victim::Writer(shmpipe::Writer::recv_from(&b)?),
        _ => Victim::Sender(shmpipe::Sender::recv_from(&b)?),
    })
}

/// The outcomes a victim call may have.
fn allowed(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::WouldBlock
            | ErrorKind::InvalidData
            | ErrorKind::UnexpectedEof
            | ErrorKind::BrokenPipe
            | ErrorKind::InvalidInput
    )
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let Some(setup) = input.byte() else { return };
    let capacity: u64 = [8, 64, 256, 4096][(setup & 3) as usize];
    let kind = [b'r', b'R', b'w', b'S'][((setup >> 2) & 3) as usize];
    let victim_reads = kind == b'r' || kind == b'R';
    let wlen = DATA_OFFSET + capacity as usize;
    // The victim's own region is honest; the peer's is ours to corrupt.
    let (own, peer) = if victim_reads {
        (
            Region::new(READER_REGION_LEN, Role::Reader, capacity),
            Region::new(wlen, Role::Writer, capacity),
        )
    } else {
        (
            Region::new(wlen, Role::Writer, capacity),
            Region::new(READER_REGION_LEN, Role::Reader, capacity),
        )
    };
    let (sock, mut peer_sock) = {
        let (a, b) = UnixStream::pair().unwrap();
        (OwnedFd::from(a), Some(b))
    };
    // Lies told before attach must be caught by the checks on attach.
    if setup & 0x10 != 0 {
        let off = [0usize, 8, 12, 16, 128][(input.byte().unwrap_or(0) % 5) as usize];
        peer.u64(off).store(input.u64(), Ordering::Relaxed);
    }
    let mut victim = match hand_over(kind, &own, &peer, &sock) {
        Ok(v) => v,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidData, "attach: {e}");
            return;
        }
    };
    match &mut victim {
        Victim::Reader(e) => e.set_nonblocking(true),
        Victim::Receiver(e) => e.set_nonblocking(true),
        Victim::Writer(e) => e.set_nonblocking(true),
        Victim::Sender(e) => e.set_nonblocking(true),
    }
    let mask = capacity - 1;
    let mut buf = vec![0u8; 2 * capacity as usize + 1];
    let mut v = Vec::new();
    while let Some(op) = input.byte() {
        match op % 12 {
            // The peer's index: anything, or near the victim's own index.
            0 => peer.u64(offset::INDEX).store(input.u64(), Ordering::Release),
            1 => {
                let base = own.u64(offset::INDEX).load(Ordering::Relaxed);
                let delta = input.u16() as i16 as i64 as u64;
                peer.u64(offset::INDEX)
                    .store(base.wrapping_add(delta), Ordering::Release);
            }
            // Data bytes (for a reader victim) at any position.
            2 => {
                let pos = input.u16() as u64;
                let n = input.byte().unwrap_or(0) as usize;
                for (k, &b) in input.bytes(n).iter().enumerate() {
                    let slot = (pos + k as u64) & mask;
                    peer.u8(DATA_OFFSET + slot as usize)
                        .store(b, Ordering::Relaxed);
                }
            }
            // A message header at the victim's head: honest or not.
            3 => {
                let head = own.u64(offset::INDEX).load(Ordering::Relaxed);
                let len = input.u16() as u32 % (capacity as u32 + 16);
                let check = if input.byte().unwrap_or(0) & 1 == 0 {
                    !len
                } else {
                    len
                };
                let mut h = [0u8; 8];
                h[..4].copy_from_slice(&len.to_le_bytes());
                h[4..].copy_from_slice(&check.to_le_bytes());
                for (k, b) in h.into_iter().enumerate() {
                    let slot = (head + k as u64) & mask;
                    peer.u8(DATA_OFFSET + slot as usize)
                        .store(b, Ordering::Relaxed);
                }
            }
            // Header fields after attach (never read again), parked word.
            4 => {
                let off = [offset::MAGIC, offset::VERSION, offset::ROLE, offset::CAPACITY][(input.byte().unwrap_or(0) % 4) as usize];
                peer.u64(off).store(input.u64(), Ordering::Relaxed);
            }
            5 => peer.u64(offset::PARKED).store(input.u64(), Ordering::Relaxed),
            // Wake bytes, or hang up.
            6 => {
                if input.byte().unwrap_or(0) & 1 == 0 {
                    if let Some(s) = &mut peer_sock {
                        let _ = rustix::net::send(
                            &*s,
                            &[1],
                            rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
                        );
                    }
                } else {
                    peer_sock = None;
                }
            }
            // The victim's calls.
            _ => {
                let n = input.u16() as usize % buf.len();
                let res: std::io::Result<usize> = match &mut victim {
                    Victim::Reader(r) => {
                        if op & 0x80 == 0 {
                            r.read(&mut buf[..n.max(1)])
                        } else {
                            r.read_chunk().map(|c| {
                                let len = c.len();
                                assert!(len <= capacity as usize);
                                assert_eq!(c.bytes().to_vec().len(), len);
                                c.consume(n.min(len));
                                len
                            })
                        }
                    }
                    Victim::Receiver(rx) => match op & 0xC0 {
                        0x00 => rx.recv(&mut buf[..n]),
                        0x40 => rx.recv_vec(&mut v).map(|()| v.len()),
                        _ => rx.recv_in_place().map(|m| {
                            let len = m.len();
                            assert_eq!(m.bytes().iter().count(), len);
                            len
                        }),
                    },
                    Victim::Writer(w) => {
                        if op & 0x80 == 0 {
                            w.write(&buf[..n.max(1)])
                        } else {
                            let n = n.min(capacity as usize);
                            w.reserve(n).map(|mut g| {
                                let (a, b) = g.as_mut_slices();
                                assert_eq!(a.len() + b.len(), n);
                                a.fill(0x11);
                                b.fill(0x22);
                                g.commit(n);
                                n
                            })
                        }
                    }
                    Victim::Sender(tx) => {
                        let n = n.min(tx.max_message());
                        tx.send(&buf[..n]).map(|()| n)
                    }
                };
                match res {
                    Ok(got) => assert!(got <= buf.len().max(capacity as usize)),
                    Err(e) => assert!(allowed(e.kind()), "victim: unexpected {e:?}"),
                }
            }
        }
    }
    if let Victim::Writer(w) = &mut victim {
        let _ = w.flush();
    }
    drop(victim);
});
