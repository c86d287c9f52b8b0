//! listener
