//! Log lines on standard error: text (tracing's own format, the default) or,
//! with `ODUFLOW_LOG_FORMAT=json`, one JSON object per line for a log
//! collector: `{"timestamp", "level", "target", "message", "fields": {...}}`,
//! plus `"spans"` (their names, outermost first) inside any. Written here
//! with serde_json, already a dependency, rather than through
//! tracing-subscriber's `json` feature, which would add tracing-serde for
//! the same few lines. Nothing secret reaches a log line in either format:
//! the API key is never a field, only its fingerprint.

use crate::config::BadInput;
use serde_json::{Map, Value};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The setting that picks the format.
pub const LOG_FORMAT_VAR: &str = "ODUFLOW_LOG_FORMAT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    /// `ODUFLOW_LOG_FORMAT`: unset or empty is text; anything but `text` or
    /// `json` is bad input, named.
    pub fn from_env() -> Result<LogFormat, BadInput> {
        match std::env::var(LOG_FORMAT_VAR) {
            Err(std::env::VarError::NotPresent) => Ok(LogFormat::Text),
            Ok(v) if v.is_empty() || v == "text" => Ok(LogFormat::Text),
            Ok(v) if v == "json" => Ok(LogFormat::Json),
            Ok(v) => {
                Err(BadInput(format!("{LOG_FORMAT_VAR}={v:?} is not a log format: use text (the default) or json")))
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(BadInput(format!("{LOG_FORMAT_VAR} is not valid text: use text (the default) or json")))
            }
        }
    }
}

/// The format chosen at start, for [`say`].
static FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// A line for the operator on standard error, whatever the log level (a
/// start-up line, a signal's notice, a stop summary, an error that ends
/// the command): the text itself, or, in JSON, one object of the log
/// lines' shape (`level` `INFO`, or `ERROR` with `error`), so a log
/// collector reads every line.
pub fn say(message: &str) {
    line("INFO", message);
}

/// [`say`] for the error that ends a command.
pub fn say_error(message: &str) {
    line("ERROR", message);
}

fn line(level: &str, message: &str) {
    if FORMAT.get() != Some(&LogFormat::Json) && LogFormat::from_env().ok() != Some(LogFormat::Json) {
        eprintln!("{message}");
        return;
    }
    let mut timestamp = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut timestamp));
    let mut line = Map::new();
    line.insert("timestamp".into(), Value::String(timestamp));
    line.insert("level".into(), Value::String(level.into()));
    line.insert("target".into(), Value::String("oduflow".into()));
    line.insert("message".into(), Value::String(message.into()));
    line.insert("fields".into(), Value::Object(Map::new()));
    eprintln!("{}", Value::Object(line));
}

/// `ODUFLOW_LOG` (tracing filter syntax), else `default`, in `format`.
pub fn init(default: &str, format: LogFormat) {
    let _ = FORMAT.set(format);
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("ODUFLOW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        // Colours only for a terminal: journald and files get plain text.
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.with_ansi(false).event_format(JsonLines).init(),
    }
}

/// One JSON object per event.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut timestamp = String::new();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert("timestamp".into(), Value::String(timestamp));
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_owned()));
        line.insert("message".into(), Value::String(fields.message.unwrap_or_default()));
        line.insert("fields".into(), Value::Object(fields.other));
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope.from_root().map(|s| Value::String(s.name().to_owned())).collect();
            line.insert("spans".into(), Value::Array(spans));
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(w, "{text}")
    }
}

/// An event's fields: the message apart, the others as JSON values.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    other: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, v: Value) {
        if field.name() == "message" {
            self.message = Some(match v {
                Value::String(s) => s,
                v => v.to_string(),
            });
        } else {
            self.other.insert(field.name().to_owned(), v);
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    /// Every line a JSON object with the documented keys; the message apart
    /// from the fields; numbers and booleans kept as such; quotes escaped.
    #[test]
    fn each_event_is_one_json_object() {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = buf.clone();
        let layer = tracing_subscriber::fmt::layer().event_format(JsonLines).with_writer(move || Sink(sink.clone()));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("run", job = 7);
            let _g = span.enter();
            tracing::warn!(pause_ms = 1500u64, group = "default", paused = true, "vultr answered \"429\"");
            tracing::error!("second\nline");
        });
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2, "{text}");
        let w = &lines[0];
        assert_eq!(w["level"], "WARN");
        assert_eq!(w["message"], "vultr answered \"429\"");
        assert_eq!(w["fields"]["pause_ms"], 1500);
        assert_eq!(w["fields"]["group"], "default");
        assert_eq!(w["fields"]["paused"], true);
        assert!(w["fields"].get("message").is_none());
        assert_eq!(w["spans"], serde_json::json!(["run"]));
        assert!(w["target"].as_str().unwrap().contains("logs"));
        assert!(w["timestamp"].as_str().unwrap().contains('T'), "{w}");
        assert_eq!(lines[1]["message"], "second\nline");
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
