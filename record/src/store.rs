//! The storage driver: puts a recorder's objects through `object_store`, into a local directory
//! or an S3-compatible bucket, and counts what it did for the node's metrics.
//!
//! Targets: a path (or `file:///path`) is a local directory, created if missing; `s3://bucket/prefix`
//! is S3, configured from the standard AWS variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL` — an `http://`
//! endpoint, such as a local test server, is allowed).

// The driver: it times the puts.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::output::{Object, ObjectKind, Output};
use crate::recorder::{Recorder, STATE_NAME};
use crate::state::{RecorderState, StateError};

/// Why storing failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The target is not a directory path, `file://` or `s3://bucket[/prefix]` URL.
    #[error("unsupported storage target {0:?}")]
    Target(String),
    /// The local directory could not be created.
    #[error("cannot create {0}: {1}")]
    Directory(String, std::io::Error),
    /// The object store refused.
    #[error(transparent)]
    ObjectStore(#[from] object_store::Error),
    /// The stored state does not decode.
    #[error(transparent)]
    State(#[from] StateError),
}

/// What the store did, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreMetrics {
    /// Objects put.
    pub puts: u64,
    /// Bytes put.
    pub bytes: u64,
    /// Of those, media segments.
    pub segments: u64,
    /// Of those, segment bytes.
    pub segment_bytes: u64,
    /// Puts that failed.
    pub errors: u64,
    /// Sum of put latencies, microseconds.
    pub latency_us_sum: u64,
    /// Longest put latency, microseconds.
    pub latency_us_max: u64,
    /// Latest put latency, microseconds.
    pub latency_us_last: u64,
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    bytes: AtomicU64,
    segments: AtomicU64,
    segment_bytes: AtomicU64,
    errors: AtomicU64,
    latency_us_sum: AtomicU64,
    latency_us_max: AtomicU64,
    latency_us_last: AtomicU64,
}

/// A recording's storage: an object store and the prefix its objects go under. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    prefix: Path,
    target: String,
    counters: Arc<Counters>,
}

impl Store {
    /// Opens `target`: a directory (path or `file://` URL) or `s3://bucket/prefix`, S3 settings
    /// from the process environment.
    pub fn open(target: &str) -> Result<Store, StoreError> {
        Store::open_inner(target, AmazonS3Builder::from_env(), &|k| {
            std::env::var(k).ok()
        })
    }

    /// As [`Store::open`], with the AWS variables read through `env` instead of the process
    /// environment (several recordings to different S3 services in one process, tests).
    pub fn open_with_env(
        target: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Store, StoreError> {
        Store::open_inner(target, AmazonS3Builder::new(), env)
    }

    fn open_inner(
        target: &str,
        base: AmazonS3Builder,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Store, StoreError> {
        if let Some(rest) = target.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(StoreError::Target(target.into()));
            }
            return Store::s3(bucket, prefix, target, base, env);
        }
        let dir = target.strip_prefix("file://").unwrap_or(target);
        if dir.is_empty() || target.contains("://") && !target.starts_with("file://") {
            return Err(StoreError::Target(target.into()));
        }
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Directory(dir.into(), e))?;
        let fs = LocalFileSystem::new_with_prefix(dir)?;
        Ok(Store {
            inner: Arc::new(fs),
            prefix: Path::default(),
            target: target.into(),
            counters: Arc::default(),
        })
    }

    fn s3(
        bucket: &str,
        prefix: &str,
        target: &str,
        base: AmazonS3Builder,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Store, StoreError> {
        // reqwest's TLS runs on rustls with ring; a provider installed already stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut b = base.with_bucket_name(bucket);
        if let Some(v) = env("AWS_ACCESS_KEY_ID") {
            b = b.with_access_key_id(v);
        }
        if let Some(v) = env("AWS_SECRET_ACCESS_KEY") {
            b = b.with_secret_access_key(v);
        }
        if let Some(v) = env("AWS_SESSION_TOKEN") {
            b = b.with_token(v);
        }
        if let Some(v) = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")) {
            b = b.with_region(v);
        }
        if let Some(e) = env("AWS_ENDPOINT_URL").or_else(|| env("AWS_ENDPOINT")) {
            b = b.with_allow_http(e.starts_with("http://")).with_endpoint(e);
        }
        let s3 = b.build()?;
        Ok(Store {
            inner: Arc::new(s3),
            prefix: Path::from(prefix.trim_matches('/')),
            target: target.into(),
            counters: Arc::default(),
        })
    }

    /// The target it was opened with.
    pub fn target(&self) -> &str {
        &self.target
    }

    fn path(&self, name: &str) -> Path {
        if self.prefix.as_ref().is_empty() {
            Path::from(name)
        } else {
            self.prefix.clone().join(name)
        }
    }

    /// Puts one object (whole: the local store writes a temporary file and renames it, S3 makes
    /// it visible at once), counting bytes and latency.
    pub async fn put(&self, object: &Object) -> Result<(), StoreError> {
        let started = Instant::now();
        let res = self
            .inner
            .put(
                &self.path(&object.name),
                PutPayload::from(object.bytes.clone()),
            )
            .await;
        let c = &self.counters;
        if let Err(e) = res {
            c.errors.fetch_add(1, Ordering::Relaxed);
            return Err(e.into());
        }
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let len = object.bytes.len() as u64;
        c.puts.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(len, Ordering::Relaxed);
        if object.kind == ObjectKind::Segment {
            c.segments.fetch_add(1, Ordering::Relaxed);
            c.segment_bytes.fetch_add(len, Ordering::Relaxed);
        }
        c.latency_us_sum.fetch_add(us, Ordering::Relaxed);
        c.latency_us_max.fetch_max(us, Ordering::Relaxed);
        c.latency_us_last.store(us, Ordering::Relaxed);
        Ok(())
    }

    /// Stores every object `rec` has output, in order, and returns its other outputs (hand-over
    /// states, events). A failed put comes back with its object; the outputs after it stay in
    /// the recorder, so the caller can put that object again and call this again.
    pub async fn drain(
        &self,
        rec: &mut Recorder,
    ) -> Result<Vec<Output>, (Box<Object>, StoreError)> {
        let mut rest = Vec::new();
        while let Some(o) = rec.poll_output() {
            match o {
                Output::Put(obj) => {
                    if let Err(e) = self.put(&obj).await {
                        return Err((Box::new(obj), e));
                    }
                }
                other => rest.push(other),
            }
        }
        Ok(rest)
    }

    /// Reads one object back.
    pub async fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let r = self.inner.get(&self.path(name)).await?;
        Ok(r.bytes().await?.to_vec())
    }

    /// The last state the recorder uploaded (for [`crate::Recorder::resume_after_crash`]),
    /// `None` when there is none.
    pub async fn load_state(&self) -> Result<Option<RecorderState>, StoreError> {
        match self.get(STATE_NAME).await {
            Ok(b) => Ok(Some(RecorderState::from_json(&b)?)),
            Err(StoreError::ObjectStore(object_store::Error::NotFound { .. })) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What it did so far.
    pub fn metrics(&self) -> StoreMetrics {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreMetrics {
            puts: l(&c.puts),
            bytes: l(&c.bytes),
            segments: l(&c.segments),
            segment_bytes: l(&c.segment_bytes),
            errors: l(&c.errors),
            latency_us_sum: l(&c.latency_us_sum),
            latency_us_max: l(&c.latency_us_max),
            latency_us_last: l(&c.latency_us_last),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_checked() {
        assert!(matches!(Store::open("s3://"), Err(StoreError::Target(_))));
        assert!(matches!(
            Store::open("gs://b/p"),
            Err(StoreError::Target(_))
        ));
        assert!(matches!(Store::open(""), Err(StoreError::Target(_))));
    }

    #[tokio::test]
    async fn local_put_get_and_metrics() {
        let dir = std::env::temp_dir().join(format!("ferry-record-store-{}", std::process::id()));
        let store = Store::open(dir.to_str().unwrap()).unwrap();
        assert!(store.load_state().await.unwrap().is_none());
        let obj = Object {
            name: "seg-00001.m4s".into(),
            kind: ObjectKind::Segment,
            bytes: vec![7; 1000],
        };
        store.put(&obj).await.unwrap();
        assert_eq!(store.get("seg-00001.m4s").await.unwrap(), vec![7; 1000]);
        assert_eq!(
            std::fs::read(dir.join("seg-00001.m4s")).unwrap().len(),
            1000
        );
        let m = store.metrics();
        assert_eq!((m.puts, m.bytes, m.segments, m.errors), (1, 1000, 1, 0));
        let _ = std::fs::remove_dir_all(dir);
    }
}
