//! Loom models of the list of owed wakes (`shmpipe_ring::owed`): wakes a
//! publish failed to send, which any thread about to sleep sends again
//! first (`shmpipe`'s `owed` module, review finding F6).
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-ring --test loom_owed --release`.
//!
//! A wake is modelled by [`FakeWake`]: it fails as many times as it is
//! told, counts the sends that went, and may ring a [`Bell`] a thread
//! sleeps on with no timeout. Its counters sit in a loom `UnsafeCell`, not
//! in atomics, so that two sends of one wake not ordered by the list's
//! lock fail the model as a data race (and add no ordering of their own).
//!
//! The handshake model checks that the list prevents the lost wake-up it
//! exists for: with the client's `pay` before its sleep removed, loom
//! reports a deadlock (checked by hand once, when the model was written:
//! `a_client_pays_what_it_owes_before_it_sleeps` then panics with
//! "deadlock; threads = [...]", every thread `Blocked`).

#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;

use shmpipe_ring::owed::{OwedList, Wake};

/// Preemption bound unless `LOOM_MAX_PREEMPTIONS` says otherwise.
const PREEMPTIONS: Option<usize> = Some(3);

#[path = "support/loom_model.rs"]
mod loom_model;
use loom_model::model;

/// What a thread sleeps on until woken: no timeout, so a lost wake-up is
/// a deadlock, which loom reports.
#[derive(Default)]
struct Bell {
    rung: Mutex<bool>,
    cond: Condvar,
}

impl Bell {
    fn ring(&self) {
        *self.rung.lock().unwrap() = true;
        self.cond.notify_all();
    }

    fn sleep(&self) {
        let mut rung = self.rung.lock().unwrap();
        while !*rung {
            rung = self.cond.wait(rung).unwrap();
        }
    }
}

/// The peer a [`FakeWake`] wakes.
struct Target {
    /// (sends that will still fail, sends that went)
    counts: UnsafeCell<(usize, usize)>,
    bell: Option<Arc<Bell>>,
}

/// A wake whose sends fail a given number of times, then go.
#[derive(Clone)]
struct FakeWake(Arc<Target>);

impl FakeWake {
    /// A wake whose first `fails` sends fail.
    fn failing(fails: usize) -> Self {
        Self::new(fails, None)
    }

    /// As `failing`, ringing `bell` when a send goes.
    fn ringing(fails: usize, bell: Arc<Bell>) -> Self {
        Self::new(fails, Some(bell))
    }

    fn new(fails: usize, bell: Option<Arc<Bell>>) -> Self {
        FakeWake(Arc::new(Target {
            counts: UnsafeCell::new((fails, 0)),
            bell,
        }))
    }

    /// How many sends went.
    fn sent(&self) -> usize {
        // SAFETY: loom checks that no send of this wake races this read.
        self.0.counts.with(|c| unsafe { (*c).1 })
    }
}

impl Wake for FakeWake {
    fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn wake(&self) -> bool {
        // SAFETY: loom checks that no other send of this wake races it.
        let went = self.0.counts.with_mut(|c| unsafe {
            let c = &mut *c;
            if c.0 > 0 {
                c.0 -= 1;
                false
            } else {
                c.1 += 1;
                true
            }
        });
        if went {
            if let Some(bell) = &self.0.bell {
                bell.ring();
            }
        }
        went
    }
}

/// After the threads joined: the flag and the list agree, each wake is
/// either still listed or sent (never both, never neither), and paying
/// until nothing is owed sends every wake.
fn settle(list: &OwedList<FakeWake>, wakes: &[&FakeWake]) {
    let (flag, len) = list.state();
    assert_eq!(flag, len > 0, "the flag and the list disagree");
    let unsent = wakes.iter().filter(|w| w.sent() == 0).count();
    assert_eq!(
        len, unsent,
        "a listed wake was sent, or an unsent one is lost"
    );
    let mut pays = 0;
    while !list.pay() {
        pays += 1;
        assert!(pays < 4, "a wake stays owed");
    }
    for wake in wakes {
        assert!(wake.sent() >= 1, "a wake was never sent");
    }
    assert_eq!(list.state(), (false, 0));
}

/// A thread that publishes (the send fails), owes the wake, then says so.
fn owe_after_failed_send(
    list: &Arc<OwedList<FakeWake>>,
    wake: &FakeWake,
) -> (thread::JoinHandle<()>, Arc<AtomicBool>) {
    let done = Arc::new(AtomicBool::new(false));
    let (list, wake, owed) = (list.clone(), wake.clone(), done.clone());
    let handle = thread::spawn(move || {
        assert!(!wake.wake(), "the publish's send must fail");
        list.owe(wake);
        owed.store(true, SeqCst);
    });
    (handle, done)
}

/// A thread about to sleep pays `times` times. A pay that starts after an
/// owe finished (as the ghost flags `owed` say) and reports nothing owed
/// must have seen that wake sent.
fn pay(
    list: &Arc<OwedList<FakeWake>>,
    owes: &[(&FakeWake, &Arc<AtomicBool>)],
    times: usize,
) -> thread::JoinHandle<()> {
    let list = list.clone();
    let owes: Vec<(FakeWake, Arc<AtomicBool>)> = owes
        .iter()
        .map(|(w, o)| ((*w).clone(), (*o).clone()))
        .collect();
    thread::spawn(move || {
        for _ in 0..times {
            let finished: Vec<bool> = owes.iter().map(|(_, o)| o.load(SeqCst)).collect();
            if list.pay() {
                for ((wake, _), finished) in owes.iter().zip(finished) {
                    if finished {
                        assert!(wake.sent() >= 1, "pay said nothing is owed, the wake is");
                    }
                }
            }
        }
    })
}

#[test]
fn a_wake_owed_while_another_thread_pays_is_sent() {
    model(PREEMPTIONS, || {
        let list = Arc::new(OwedList::new());
        // The publish's send fails, and so does the first send again.
        let wake = FakeWake::failing(2);
        let (owing, owed) = owe_after_failed_send(&list, &wake);
        let payer = pay(&list, &[(&wake, &owed)], 2);
        owing.join().unwrap();
        payer.join().unwrap();
        settle(&list, &[&wake]);
    });
}

#[test]
fn wakes_two_threads_owe_while_a_third_pays_are_all_sent() {
    model(PREEMPTIONS, || {
        let list = Arc::new(OwedList::new());
        let first = FakeWake::failing(1);
        let second = FakeWake::failing(1);
        let (owing_first, first_owed) = owe_after_failed_send(&list, &first);
        let (owing_second, second_owed) = owe_after_failed_send(&list, &second);
        let payer = pay(&list, &[(&first, &first_owed), (&second, &second_owed)], 1);
        owing_first.join().unwrap();
        owing_second.join().unwrap();
        payer.join().unwrap();
        settle(&list, &[&first, &second]);
    });
}

/// The client's peer: asleep until the request's wake comes, then it
/// rings the reply.
fn spawn_peer(request: &Arc<Bell>, reply: &Arc<Bell>) -> thread::JoinHandle<()> {
    let (request, reply) = (request.clone(), reply.clone());
    thread::spawn(move || {
        request.sleep();
        reply.ring();
    })
}

/// The lost wake-up the list prevents (F6): a client publishes a request,
/// but the wake to its peer (asleep until woken) fails; the client then
/// sleeps on something else, the reply. Unless it pays first, both sleep
/// for ever.
#[test]
fn a_client_pays_what_it_owes_before_it_sleeps() {
    model(PREEMPTIONS, || {
        let list = Arc::new(OwedList::new());
        let request = Arc::new(Bell::default());
        let reply = Arc::new(Bell::default());
        let peer = spawn_peer(&request, &reply);
        let client = thread::spawn(move || {
            let wake = FakeWake::ringing(1, request);
            if !wake.wake() {
                list.owe(wake);
            }
            // Without this pay the model deadlocks.
            assert!(list.pay(), "nobody else pays: the wake must go");
            reply.sleep();
        });
        client.join().unwrap();
        peer.join().unwrap();
    });
}

/// As above, with another thread about to sleep that pays at the same
/// time, and a wake that fails once more: the client's pay can then find
/// the lock taken while the other thread's send fails, and (as `shmpipe`
/// sleeps only briefly while a wake stays owed) must try again. A `pay`
/// that reported nothing owed when it found the lock taken would deadlock
/// here.
#[test]
fn a_client_pays_while_another_thread_pays_too() {
    model(PREEMPTIONS, || {
        let list = Arc::new(OwedList::new());
        let request = Arc::new(Bell::default());
        let reply = Arc::new(Bell::default());
        let peer = spawn_peer(&request, &reply);
        let other = {
            let list = list.clone();
            thread::spawn(move || {
                list.pay();
            })
        };
        let client = thread::spawn(move || {
            let wake = FakeWake::ringing(2, request);
            if !wake.wake() {
                list.owe(wake);
            }
            // The brief sleep, modelled as a yield.
            while !list.pay() {
                thread::yield_now();
            }
            reply.sleep();
        });
        client.join().unwrap();
        other.join().unwrap();
        peer.join().unwrap();
    });
}
