//! One module per command: each validates its input, opens what it needs,
//! calls the engine or the store, and hands the result to `output`.

pub mod adopt;
pub mod backup;
pub mod bulk;
pub mod check;
pub mod client;
pub mod credentials;
pub mod demo;
pub mod events;
pub mod import;
pub mod init;
pub mod orphan;
pub mod queue;
pub mod reconcile;
pub mod restore;
pub mod serve;
pub mod sim;
pub mod webhook;
pub mod worker;
