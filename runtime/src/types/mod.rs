//! The vocabulary every layer above speaks: errors, records and headers, windows, timestamp
//! extractors and the error handlers' types. Depends on nothing else in the crate.

pub(crate) mod error;
pub(crate) mod handlers;
pub(crate) mod host;
pub(crate) mod record;
pub(crate) mod timestamp;
pub(crate) mod window;
