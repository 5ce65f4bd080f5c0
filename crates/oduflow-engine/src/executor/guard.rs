//! What a run checks before each side effect and each request: its claim
//! ([`RunGuard`], the [`SendGuard`] the provider asks), and a dispatch's or
//! change's receipt marked sent right before its request leaves
//! ([`SentMark`]).

use super::*;
use std::future::Future;
use std::pin::Pin;

/// A run's claim, asked right before every provider request (as the
/// [`SendGuard`] the provider asks after its rate-limiter wait and before
/// each retry) and by the run before its other side effects. The first
/// refusal sticks: a run that lost its claim stays stopped, and whatever a
/// stopped request returned is thrown away, never recorded.
pub(super) struct RunGuard {
    pub(super) fence: Fence,
    pub(super) stop: Mutex<Option<Stop>>,
}

#[derive(Clone)]
pub(super) enum Stop {
    Superseded,
    Lost(String),
}

impl RunGuard {
    pub(super) async fn claim_holds(&self) -> Result<(), EngineError> {
        self.stopped()?;
        let stop = match self.fence.check().await {
            Ok(Footing::Held) => return Ok(()),
            Ok(Footing::Superseded) => Stop::Superseded,
            Err(e) => Stop::Lost(e.to_string()),
        };
        *self.stop.lock().expect("run guard poisoned") = Some(stop);
        self.stopped()
    }

    /// `Err` once any check failed, without asking the store again.
    pub(super) fn stopped(&self) -> Result<(), EngineError> {
        match self.stop.lock().expect("run guard poisoned").clone() {
            None => Ok(()),
            Some(Stop::Superseded) => Err(EngineError::Superseded),
            Some(Stop::Lost(e)) => Err(EngineError::ClaimLost(e)),
        }
    }
}

impl SendGuard for RunGuard {
    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            self.claim_holds().await.map_err(|e| match e {
                EngineError::Superseded => "the client's record moved on while the run was in flight".to_owned(),
                e => e.to_string(),
            })
        })
    }
}

/// A dispatch's receipt marked sent right before its request leaves (the
/// provider asks it after the rate slot and the run's guard). A mark that
/// cannot be recorded stops the request; whether it was recorded tells the
/// run, when the request then did not leave, which record is its to write.
pub(crate) struct SentMark {
    receipts: crate::receipt_writer::ReceiptWriter,
    clock: crate::SharedClock,
    of: MarkOf,
    client: ClientId,
    /// The key the request goes out with: recorded by the mark (a receipt
    /// claimed before a key rotation is sent with the new key).
    key: KeyFingerprint,
    /// A planted bug's create has no receipt to mark.
    unrecorded: bool,
    marked: std::sync::atomic::AtomicBool,
}

/// The receipt a [`SentMark`] marks.
pub(crate) enum MarkOf {
    Dispatch(OperationKey),
    /// A change receipt's operation key (§3.4).
    Change(String),
}

impl SentMark {
    pub(crate) fn new<P: Provider>(w: &Worker<P>, of: MarkOf, client: ClientId, unrecorded: bool) -> Self {
        Self {
            receipts: w.receipts.clone(),
            clock: w.clock.clone(),
            of,
            client,
            key: w.provider.key_fingerprint(),
            unrecorded,
            marked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether this run recorded the receipt as sent.
    pub(crate) fn marked(&self) -> bool {
        self.marked.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl provider::SendMark for SentMark {
    fn mark(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            if self.unrecorded || self.marked() {
                return Ok(());
            }
            let now = self.clock.now_ms();
            let recorded = match &self.of {
                MarkOf::Dispatch(op) => self.receipts.mark_sent(op, &self.client, &self.key, now).await,
                MarkOf::Change(key) => self.receipts.ledger().change_mark_sent(key, &self.client, &self.key, now).await,
            };
            recorded.map_err(|e| format!("the receipt could not be marked sent: {e}"))?;
            // A crash from here on leaves the receipt marked: maybe sent.
            if matches!(self.of, MarkOf::Dispatch(_)) {
                crate::crash_if_asked("request-about-to-be-sent");
                fail::fail_point!("request-about-to-be-sent", |_| Err("fail point request-about-to-be-sent".into()));
            }
            self.marked.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    }
}
