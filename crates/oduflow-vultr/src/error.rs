//! The adapter's error for calls outside the `Provider` trait (account,
//! regions, plans, DNS). No variant ever holds the API key: messages are built
//! from status codes, Vultr's `error` text and reqwest's error chain, and the
//! key is only ever in a sensitive request header, which none of them print.

use oduflow_model::provider::ProviderError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VultrError {
    #[error("invalid Vultr client configuration: {0}")]
    Config(String),
    /// Connect, send or receive failed, or timed out, after the bounded retries.
    #[error("transport error talking to Vultr: {0}")]
    Transport(String),
    /// A status we do not retry, or the last one once retries were spent.
    #[error("Vultr answered {status}: {message}")]
    Status { status: u16, message: String },
    /// A 2xx whose body is not what the API documents.
    #[error("unreadable Vultr response: {0}")]
    Decode(String),
    /// A listing whose cursor did not end within the page bound, or repeated.
    #[error("Vultr listing did not end: {0}")]
    Pagination(String),
}

impl From<VultrError> for ProviderError {
    fn from(e: VultrError) -> Self {
        match e {
            VultrError::Transport(m) => ProviderError::Transport(m),
            VultrError::Status { status, message } => ProviderError::Status { status, message },
            VultrError::Decode(m) | VultrError::Pagination(m) | VultrError::Config(m) => ProviderError::Decode(m),
        }
    }
}
