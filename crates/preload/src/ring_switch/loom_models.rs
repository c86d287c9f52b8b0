//! Loom model of the ring switch: a thread making a ring while another
//! stops rings and spills what the table notes.
//!
//! Run with
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p shmpipe-preload --release --lib`.
//!
//! The table is one word, stored and loaded `Relaxed` as the library's
//! table and its highest descriptor are. A ring noted in it must be
//! spilled by its maker or by the stopper: one spilled by neither is a
//! ring an io_uring would read past.

use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;
use loom::thread;

use super::*;

struct World {
    switch: Switch,
    /// The table: 1 once the maker noted its ring.
    noted: AtomicU32,
    spilled_by_maker: AtomicBool,
    spilled_by_stopper: AtomicBool,
}

/// `ring_io::new_pipe`: a ring only while on; noted, then checked.
fn make(w: &World) {
    if !w.switch.on() {
        return;
    }
    w.noted.store(1, Ordering::Relaxed);
    if !w.switch.still_on_after_making() {
        w.spilled_by_maker.store(true, Ordering::Relaxed);
    }
}

/// `syscall_hook::making_io_uring`: stop, then spill what the table notes.
fn stop_and_spill(w: &World) {
    w.switch.stop();
    if w.noted.load(Ordering::Relaxed) == 1 {
        w.spilled_by_stopper.store(true, Ordering::Relaxed);
    }
}

#[test]
fn no_ring_made_during_a_stop_is_left_unspilled() {
    loom::model(|| {
        let w = Arc::new(World {
            switch: Switch::off(),
            noted: AtomicU32::new(0),
            spilled_by_maker: AtomicBool::new(false),
            spilled_by_stopper: AtomicBool::new(false),
        });
        w.switch.turn_on();
        let maker = {
            let w = w.clone();
            thread::spawn(move || make(&w))
        };
        stop_and_spill(&w);
        maker.join().unwrap();
        if w.noted.load(Ordering::Relaxed) == 1 {
            assert!(
                w.spilled_by_maker.load(Ordering::Relaxed)
                    || w.spilled_by_stopper.load(Ordering::Relaxed),
                "a ring made during the stop was spilled by neither side"
            );
        }
    });
}

/// The model fails without the fences: the same sides with the fences
/// left out (plain `Relaxed` store and load of the switch), where loom
/// finds the ring spilled by neither.
#[test]
#[should_panic(expected = "spilled by neither")]
fn without_the_fences_a_ring_is_left_behind() {
    loom::model(|| {
        let on = Arc::new(AtomicU32::new(1));
        let noted = Arc::new(AtomicU32::new(0));
        let by_maker = Arc::new(AtomicBool::new(false));
        let maker = {
            let (on, noted, by_maker) = (on.clone(), noted.clone(), by_maker.clone());
            thread::spawn(move || {
                noted.store(1, Ordering::Relaxed);
                if on.load(Ordering::Relaxed) == 0 {
                    by_maker.store(true, Ordering::Relaxed);
                }
            })
        };
        on.store(0, Ordering::Relaxed);
        let by_stopper = noted.load(Ordering::Relaxed) == 1;
        maker.join().unwrap();
        if noted.load(Ordering::Relaxed) == 1 {
            assert!(
                by_maker.load(Ordering::Relaxed) || by_stopper,
                "a ring made during the stop was spilled by neither side"
            );
        }
    });
}
