//! `rpc::serve_waitset` serves its clients by turns: a client that keeps
//! its requests coming gets a bounded number served in a row, and then
//! the others get theirs, however many requests it still has queued.

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::watchdog;

#[shmpipe::service]
trait Note {
    fn note(&self, who: u32) -> u32;
}

/// Who called, in the order the server served them.
struct Log {
    calls: Mutex<Vec<u32>>,
    /// The first busy request waits here until everything is queued.
    gate: Mutex<mpsc::Receiver<()>>,
}

const GATE: u32 = 0;
const BUSY: u32 = 1;
const OTHER: u32 = 2;

/// Requests the busy client has queued behind its first one: far more
/// than any turn.
const QUEUED: usize = 4000;

impl Note for Log {
    fn note(&self, who: u32) -> u32 {
        if who == GATE {
            self.gate.lock().unwrap().recv().unwrap();
        }
        let mut calls = self.calls.lock().unwrap();
        calls.push(who);
        calls.len() as u32
    }
}

#[test]
fn a_busy_client_holds_no_other_up() {
    let _w = watchdog(Duration::from_secs(120));
    let (path, listener) = common::listener("rpc-turns", 1 << 18);
    let (open, gate) = mpsc::channel();
    let log = Arc::new(Log {
        calls: Mutex::new(Vec::new()),
        gate: Mutex::new(gate),
    });
    std::thread::spawn({
        let log = log.clone();
        move || shmpipe::rpc::serve_waitset(listener, move |_| NoteServer(log.clone()))
    });
    let busy = NoteClient::connect(&path).unwrap();
    let other = NoteClient::connect(&path).unwrap();
    // The server sits in the busy client's first request while the rest
    // of its requests, and then the other client's one, are queued: once
    // let go, it has all of them in front of it at once.
    busy.send_note(GATE).unwrap();
    for _ in 0..QUEUED {
        busy.send_note(BUSY).unwrap();
    }
    other.send_note(OTHER).unwrap();
    open.send(()).unwrap();
    let served_at = other.recv_note().unwrap() as usize;
    for _ in 0..=QUEUED {
        busy.recv_note().unwrap();
    }
    // Served before the busy client's queue ran out, not after all of it.
    assert!(
        served_at < QUEUED / 2,
        "the other client was served {served_at}th, behind {} of {QUEUED} queued requests",
        served_at - 2
    );
    assert_eq!(log.calls.lock().unwrap().len(), QUEUED + 2);
}
