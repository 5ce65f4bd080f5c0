//! `oduflow events`: the event feed (`GET /api/v1/events/feed`), refused
//! and read exactly as the API does.

use crate::config::{BadInput, Config};
use crate::output::outln;
use crate::setup::open;
use anyhow::Result;
use oduflow_model::time::rfc3339;
use oduflow_store::FeedQuery;

pub async fn run(cfg: &Config, after: Option<i64>, limit: Option<i64>, wait: Option<u64>, json: bool) -> Result<()> {
    let q = FeedQuery::new(after, limit, wait).map_err(BadInput)?;
    let store = open(cfg).await?;
    let page = store.feed_read(&q).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&page)?)?;
        return Ok(());
    }
    for e in &page.events {
        let client = e.client.as_deref().unwrap_or("-");
        outln!("{:>8}  {}  {:<28} {:<20} {}", e.position, rfc3339(e.at_ms), e.kind, client, e.detail)?;
    }
    outln!("next: {} (pass it as --after to read on; head {})", page.next, page.head)
}
