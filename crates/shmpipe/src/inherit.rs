//! inherit
