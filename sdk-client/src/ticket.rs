//! A migration ticket persisted in a file, so that a restarted client resumes its session.

use std::path::Path;

/// A ticket persisted at `path` (`None`: none, or unreadable).
pub(crate) fn load_ticket(path: &Path) -> Option<String> {
    let t = std::fs::read_to_string(path).ok()?;
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// Persists `ticket` at `path` (atomically), or removes the file.
pub(crate) fn store_ticket(path: &Path, ticket: Option<&str>) {
    let r = match ticket {
        Some(t) => {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, t).and_then(|()| std::fs::rename(&tmp, path))
        }
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => r,
        },
    };
    if let Err(e) = r {
        tracing::warn!(path = %path.display(), error = %e, "ticket not persisted");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_persist_in_a_file() {
        let path = std::env::temp_dir().join(format!("ferry-ticket-{}", std::process::id()));
        assert_eq!(load_ticket(&path), None);
        store_ticket(&path, Some("t1"));
        assert_eq!(load_ticket(&path).as_deref(), Some("t1"));
        store_ticket(&path, Some("t2"));
        assert_eq!(load_ticket(&path).as_deref(), Some("t2"));
        store_ticket(&path, None);
        assert_eq!(load_ticket(&path), None);
        store_ticket(&path, None);
    }
}
