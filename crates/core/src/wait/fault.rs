//! Test fault injection for the waits, in one place: unit tests make the
//! barriers of their thread fail (`BARRIER_FAILS`), to drive the paths a
//! failed `membarrier` takes. Outside tests the hook is a constant
//! `false`, and the code that asks it compiles as if it did not.

#[cfg(test)]
thread_local! {
    /// Unit tests: every barrier of this thread counts as failed.
    pub(crate) static BARRIER_FAILS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether a test made this thread's barriers count as failed.
#[cfg(test)]
pub(super) fn barrier_fails() -> bool {
    BARRIER_FAILS.with(|f| f.get())
}

/// Whether a test made this thread's barriers count as failed: never,
/// outside tests.
#[cfg(not(test))]
#[inline(always)]
pub(super) fn barrier_fails() -> bool {
    false
}
