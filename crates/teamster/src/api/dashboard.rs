//! `GET /`: the live dashboard, one static page (no build step, no library: its charts are
//! drawn on a canvas by the simulator's `charts.js`, so report.html shows the same), fed by `GET /api/v1/stream`, a server-sent event
//! stream carrying each snapshot the loop publishes.

use super::ApiState;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::Html;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::Stream;
use tokio_stream::StreamExt;

/// The page, with the chart code it shares with the simulator's report.html inlined.
pub async fn page() -> Html<String> {
    Html(teamster_web::with_charts(include_str!("dashboard.html")))
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
