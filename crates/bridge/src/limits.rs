//! What a serving bridge spends on its remote peers ([`BridgeLimits`]),
//! and the tally that holds it to that.
//!
//! The server behind a bridge sees one client process, the bridge, for
//! every remote connection, so its own per-process bound
//! ([`shmpipe_rpc::DEFAULT_PER_PROCESS`]) caps the bridge as a whole and
//! local clients keep their share. Between remote peers the bridge does
//! what the server cannot: it counts connections per remote peer, a
//! certificate name when the serving bridge lists them
//! ([`Options::peers`](crate::Options), feature `zenoh`), else a Zenoh
//! session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Remote connections a serving bridge carries at once when not told
/// otherwise: 48, under the 64 connections per process
/// ([`shmpipe_rpc::DEFAULT_PER_PROCESS`]) a server gives the bridge by
/// default, so that the bridge's own refusal, which names the peer, comes
/// first.
///
/// # Examples
///
/// ```
/// assert!(shmpipe_bridge::DEFAULT_CONNECTIONS < shmpipe_rpc::DEFAULT_PER_PROCESS);
/// ```
pub const DEFAULT_CONNECTIONS: usize = 48;

/// Connections of one remote peer (a listed certificate name, else one
/// Zenoh session) a serving bridge
/// carries at once when not told otherwise: 32, two thirds of
/// [`DEFAULT_CONNECTIONS`], so that one peer at its bound leaves 16 for
/// the others, and a host's two dozen clients through one connecting
/// bridge fit.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe_bridge::DEFAULT_PER_PEER, 32);
/// ```
pub const DEFAULT_PER_PEER: usize = 32;

/// Bytes of frames one connection may have in flight in each direction
/// when not told otherwise: 4 MiB, two of the file service's largest
/// frames (1 MiB) and change. A sender waits for the receiver's grant
/// past it; a receiver drops a connection whose peer sends past it.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe_bridge::DEFAULT_WINDOW, 4 << 20);
/// ```
pub const DEFAULT_WINDOW: usize = 4 << 20;

/// The largest RPC frame body a bridge carries when not told otherwise:
/// 1 MiB, the file service's `max_frame`.
///
/// # Examples
///
/// ```
/// assert_eq!(shmpipe_bridge::DEFAULT_MAX_FRAME, 1 << 20);
/// ```
pub const DEFAULT_MAX_FRAME: u32 = 1 << 20;

/// Bounds of a bridge: connections in all and per remote peer (on the
/// serving side), and per connection the frame size and the bytes in
/// flight (both sides). Memory per connection is at most the window in
/// each direction.
///
/// # Examples
///
/// ```
/// let mut limits = shmpipe_bridge::BridgeLimits::new();
/// limits.connections(32).per_peer(4).window(8 << 20);
/// assert_eq!(limits.max_per_peer(), 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BridgeLimits {
    connections: usize,
    per_peer: usize,
    window: usize,
    max_frame: u32,
}

impl Default for BridgeLimits {
    fn default() -> Self {
        Self::new()
    }
}

impl BridgeLimits {
    /// The defaults: [`DEFAULT_CONNECTIONS`], [`DEFAULT_PER_PEER`],
    /// [`DEFAULT_WINDOW`], [`DEFAULT_MAX_FRAME`].
    ///
    /// # Examples
    ///
    /// ```
    /// let limits = shmpipe_bridge::BridgeLimits::new();
    /// assert_eq!(limits.max_connections(), shmpipe_bridge::DEFAULT_CONNECTIONS);
    /// ```
    pub fn new() -> Self {
        BridgeLimits {
            connections: DEFAULT_CONNECTIONS,
            per_peer: DEFAULT_PER_PEER,
            window: DEFAULT_WINDOW,
            max_frame: DEFAULT_MAX_FRAME,
        }
    }

    /// Most remote connections carried at once, at least one.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe_bridge::BridgeLimits::new();
    /// assert_eq!(limits.connections(0).max_connections(), 1);
    /// ```
    pub fn connections(&mut self, n: usize) -> &mut Self {
        self.connections = n.max(1);
        self
    }

    /// Most connections of one remote peer at once, at least one.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe_bridge::BridgeLimits::new();
    /// assert_eq!(limits.per_peer(2).max_per_peer(), 2);
    /// ```
    pub fn per_peer(&mut self, n: usize) -> &mut Self {
        self.per_peer = n.max(1);
        self
    }

    /// Bytes in flight per connection and direction; at least two frames
    /// of `max_frame` (so that a sender waiting for a grant always gets
    /// one), whatever this says.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe_bridge::BridgeLimits::new();
    /// limits.window(1);
    /// assert!(limits.max_window() > 2 << 20);
    /// ```
    pub fn window(&mut self, bytes: usize) -> &mut Self {
        self.window = bytes;
        self
    }

    /// The largest RPC frame body carried; a larger one ends its
    /// connection. Set it to the largest `max_frame` of the services
    /// carried.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe_bridge::BridgeLimits::new();
    /// assert_eq!(limits.max_frame(64 << 10).frame_limit(), 64 << 10);
    /// ```
    pub fn max_frame(&mut self, bytes: u32) -> &mut Self {
        self.max_frame = bytes;
        self
    }

    /// Connections carried at once.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(shmpipe_bridge::BridgeLimits::new().max_connections(), 48);
    /// ```
    pub fn max_connections(&self) -> usize {
        self.connections
    }

    /// Connections of one peer at once (never above the total).
    ///
    /// # Examples
    ///
    /// ```
    /// let mut limits = shmpipe_bridge::BridgeLimits::new();
    /// assert_eq!(limits.connections(3).max_per_peer(), 3);
    /// ```
    pub fn max_per_peer(&self) -> usize {
        self.per_peer.min(self.connections)
    }

    /// Window bytes per connection and direction.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(shmpipe_bridge::BridgeLimits::new().max_window(), 4 << 20);
    /// ```
    pub fn max_window(&self) -> usize {
        let two_frames = 2 * crate::frame::charge(crate::frame::PREFIX + self.max_frame as usize);
        self.window.max(two_frames)
    }

    /// The largest frame body carried.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(shmpipe_bridge::BridgeLimits::new().frame_limit(), 1 << 20);
    /// ```
    pub fn frame_limit(&self) -> u32 {
        self.max_frame
    }
}

/// Connections carried now: in all and per peer (the serving side's,
/// built with the `zenoh` feature).
#[cfg_attr(not(feature = "zenoh"), allow(dead_code))]
#[derive(Debug, Default)]
pub(crate) struct Tally {
    total: usize,
    by_peer: HashMap<String, usize>,
}

/// A connection's place in the tally, given back when dropped.
#[cfg_attr(not(feature = "zenoh"), allow(dead_code))]
#[derive(Debug)]
pub(crate) struct Seat {
    tally: Arc<Mutex<Tally>>,
    peer: String,
}

#[cfg_attr(not(feature = "zenoh"), allow(dead_code))]
impl Seat {
    /// A place for a connection of `peer`, or why there is none.
    pub(crate) fn take(
        tally: &Arc<Mutex<Tally>>,
        limits: &BridgeLimits,
        peer: &str,
    ) -> Result<Seat, String> {
        let mut t = tally.lock().unwrap_or_else(PoisonError::into_inner);
        if t.total >= limits.max_connections() {
            return Err(format!(
                "the bridge carries {} connections, its limit (--connections)",
                t.total
            ));
        }
        let mine = t.by_peer.get(peer).copied().unwrap_or(0);
        if mine >= limits.max_per_peer() {
            return Err(format!(
                "peer {peer} has {mine} connections through this bridge, at most {} per peer (--per-peer)",
                limits.max_per_peer()
            ));
        }
        t.total += 1;
        *t.by_peer.entry(peer.to_owned()).or_default() += 1;
        Ok(Seat {
            tally: tally.clone(),
            peer: peer.to_owned(),
        })
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut t = self.tally.lock().unwrap_or_else(PoisonError::into_inner);
        t.total -= 1;
        if let Some(n) = t.by_peer.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                t.by_peer.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_at_its_bound_leaves_the_others_their_share() {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut limits = BridgeLimits::new();
        limits.connections(5).per_peer(2);
        let a: Vec<_> = (0..2)
            .map(|_| Seat::take(&tally, &limits, "a").unwrap())
            .collect();
        let refused = Seat::take(&tally, &limits, "a").unwrap_err();
        assert!(refused.contains("per peer"), "{refused}");
        let b = Seat::take(&tally, &limits, "b").expect("another peer still served");
        drop(a);
        let _again = Seat::take(&tally, &limits, "a").expect("seats come back");
        drop(b);
    }

    #[test]
    fn the_total_bounds_all_peers() {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut limits = BridgeLimits::new();
        limits.connections(2).per_peer(2);
        let _a = Seat::take(&tally, &limits, "a").unwrap();
        let _b = Seat::take(&tally, &limits, "b").unwrap();
        let refused = Seat::take(&tally, &limits, "c").unwrap_err();
        assert!(refused.contains("--connections"), "{refused}");
    }
}
