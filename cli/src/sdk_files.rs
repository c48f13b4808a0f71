//! `/sdk/{file}`: the browser SDK, served by the scheduler and every node (CORS open), so a page
//! from anywhere can `import { FerryClient } from 'http://…/sdk/ferry.js'`.

use axum::Router;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The route, for any router state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/sdk/{file}", get(serve))
}

async fn serve(Path(file): Path<String>) -> Response {
    let Some(body) = ferry_sdk::js::file(&file) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")],
            format!("no SDK file {file:?}\n"),
        )
            .into_response();
    };
    let kind = if file.ends_with(".d.ts") {
        "text/plain; charset=utf-8"
    } else {
        "text/javascript; charset=utf-8"
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
