//! `GET /`: the live dashboard, one static page (no build step, no library: its charts are
//! drawn on a canvas by `teamster-web`'s `charts.js`, so the simulator's report.html shows the
//! same), fed by `GET /api/v1/stream`, a server-sent event stream carrying each snapshot the
//! loop publishes. Its what-if panel asks `POST /api/v1/whatif` ([`super::whatif`]) and draws
//! the answer with the same charts.

use super::ApiState;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::Html;
use teamster_core::teaming::Policy;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::Stream;
use tokio_stream::StreamExt;

/// The page, with the chart code it shares with the simulator's report.html inlined.
pub async fn page() -> Html<String> {
    Html(page_html())
}

/// The page's text: the chart code and style inlined, and the teaming policies the what-if
/// panel offers (JSON, so a name is never read as script).
fn page_html() -> String {
    let policies = serde_json::to_string(Policy::names()).unwrap_or_else(|_| "[]".into());
    teamster_web::with_charts(include_str!("dashboard.html")).replace("/*POLICIES*/", &policies.replace("</", "<\\/"))
}

/// Every snapshot, as it is published, as `data: <json>` events.
pub async fn stream(State(s): State<ApiState>) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let events = WatchStream::new(s.snapshots.clone()).map(|snap| {
        Ok(Event::default()
            .json_data(&*snap)
            .unwrap_or_else(|_| Event::default().comment("unencodable")))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

#[cfg(test)]
mod tests {
    /// The what-if panel offers every teaming policy the daemon knows, as a JSON array.
    #[test]
    fn the_page_lists_every_policy_for_the_what_if_panel() {
        let page = super::page_html();
        assert!(!page.contains("/*POLICIES*/") && !page.contains("/*CHARTS*/"));
        let list = page
            .split("const POLICIES = ")
            .nth(1)
            .and_then(|rest| rest.split(";\n").next())
            .expect("the page declares POLICIES");
        let names: Vec<String> = serde_json::from_str(list).unwrap();
        assert_eq!(names, super::Policy::names());
        assert!(names.iter().any(|n| n == "load-based"));
    }
}
