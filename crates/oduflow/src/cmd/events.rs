//! `oduflow events`: the event feed (`GET /api/v1/events/feed`), refused
//! and read exactly as the API does.

use crate::config::{BadInput, Config};
use crate::output::outln;
use crate::setup::open;
use anyhow::Result;
use oduflow_model::time::rfc3339;
use oduflow_store::FeedQuery;

/// How the events are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Text,
    /// The page, as the API gives it.
    Json,
    /// Every event to the last, one JSON object per line.
    Export,
}

impl From<bool> for Show {
    fn from(json: bool) -> Self {
        if json { Show::Json } else { Show::Text }
    }
}

pub async fn run(cfg: &Config, after: Option<i64>, limit: Option<i64>, wait: Option<u64>, show: Show) -> Result<()> {
    let mut q = FeedQuery::new(after, limit, wait).map_err(BadInput)?;
    let store = open(cfg).await?;
    if show == Show::Export {
        // Up to the head as the first page saw it: the export ends even
        // while workers keep writing.
        let mut until = None;
        loop {
            let page = store.feed_read(&q).await?;
            let head = *until.get_or_insert(page.head);
            for e in page.events.iter().filter(|e| e.position <= head) {
                outln!("{}", serde_json::to_string(e)?)?;
            }
            if page.events.is_empty() || page.next >= head {
                return Ok(());
            }
            q = FeedQuery::new(Some(page.next), limit, None).map_err(BadInput)?;
        }
    }
    let page = store.feed_read(&q).await?;
    if show == Show::Json {
        outln!("{}", serde_json::to_string_pretty(&page)?)?;
        return Ok(());
    }
    for e in &page.events {
        let client = e.client.as_deref().unwrap_or("-");
        let by = e.actor.as_deref().unwrap_or("-");
        outln!("{:>8}  {}  {:<28} {:<20} {:<20} {}", e.position, rfc3339(e.at_ms), e.kind, client, by, e.detail)?;
    }
    outln!("next: {} (pass it as --after to read on; head {})", page.next, page.head)
}
