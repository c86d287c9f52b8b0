//! shmpipe
