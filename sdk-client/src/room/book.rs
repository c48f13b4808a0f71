//! The commands waiting for their answer, oldest first. A command is sent once the room is
//! joined on a socket; the socket's receipt or error frame for its key settles it. When the
//! socket drops, every command it did not answer is sent again, same key, on the next one (the
//! node answers a retry with the first receipt). A `join` is tied to its socket: it is never sent
//! again (each new socket joins with a fresh key). Pure: `reply` is whatever the driver answers
//! the command with.

/// One waiting command.
#[derive(Debug)]
struct Entry<T> {
    key: String,
    text: String,
    /// A join: tied to the socket it was sent on.
    once: bool,
    /// The socket it was last sent on (`None`: not sent yet).
    conn: Option<u64>,
    reply: T,
}

/// Commands not answered yet, oldest first.
#[derive(Debug)]
pub(crate) struct Book<T> {
    entries: Vec<Entry<T>>,
}

impl<T> Default for Book<T> {
    fn default() -> Self {
        Book {
            entries: Vec::new(),
        }
    }
}

impl<T> Book<T> {
    /// A command to send once the room is joined.
    pub(crate) fn push(&mut self, key: String, text: String, reply: T) {
        self.entries.push(Entry {
            key,
            text,
            once: false,
            conn: None,
            reply,
        });
    }

    /// A join sent on `conn` (never sent again).
    pub(crate) fn push_join(&mut self, key: String, text: String, conn: u64, reply: T) {
        self.entries.push(Entry {
            key,
            text,
            once: true,
            conn: Some(conn),
            reply,
        });
    }

    /// The frames to send on `conn`, now joined there, oldest first: those never sent, and with
    /// `again` every one not answered (after a reconnect or a move). They count as sent on `conn`.
    pub(crate) fn outgoing(&mut self, conn: u64, again: bool) -> Vec<String> {
        self.entries
            .iter_mut()
            .filter(|e| !e.once && (again || e.conn.is_none()))
            .map(|e| {
                e.conn = Some(conn);
                e.text.clone()
            })
            .collect()
    }

    /// The answer for `key` came: the oldest sent command with that key, removed.
    pub(crate) fn answer(&mut self, key: &str) -> Option<T> {
        let i = self
            .entries
            .iter()
            .position(|e| e.key == key && e.conn.is_some())?;
        Some(self.entries.remove(i).reply)
    }

    /// `conn` closed: the joins sent on it, removed (the other commands wait for the next socket).
    pub(crate) fn closed(&mut self, conn: u64) -> Vec<T> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.entries.len() {
            if self.entries[i].once && self.entries[i].conn == Some(conn) {
                out.push(self.entries.remove(i).reply);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Gives up on `key` (a join not answered in time).
    pub(crate) fn remove(&mut self, key: &str) -> Option<T> {
        let i = self.entries.iter().position(|e| e.key == key)?;
        Some(self.entries.remove(i).reply)
    }

    /// Every command, removed (the room ended).
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.entries.drain(..).map(|e| e.reply).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_wait_for_a_join_and_go_again_after_a_drop() {
        let mut b = Book::default();
        // Made while connecting: not sent yet, so an answer for its key is not its answer.
        b.push("k1".into(), "f1".into(), 1);
        assert_eq!(b.answer("k1"), None);
        b.push_join("j1".into(), "join1".into(), 7, 100);
        // Joined on socket 7: what waited goes out (the join is not sent again).
        assert_eq!(b.outgoing(7, false), ["f1"]);
        b.push("k2".into(), "f2".into(), 2);
        assert_eq!(b.answer("j1"), Some(100));
        assert_eq!(b.outgoing(7, false), ["f2"]);
        assert_eq!(b.outgoing(7, false), Vec::<String>::new());
        b.push("k3".into(), "f3".into(), 3);
        b.push_join("j2".into(), "join2".into(), 7, 101);
        // Socket 7 drops with k1, k2 unanswered and k3 never sent: the join there fails, the
        // rest goes on the next socket, same keys, oldest first.
        assert_eq!(b.closed(7), [101]);
        b.push_join("j3".into(), "join3".into(), 8, 102);
        assert_eq!(b.answer("j3"), Some(102));
        assert_eq!(b.outgoing(8, true), ["f1", "f2", "f3"]);
        assert_eq!(b.answer("k2"), Some(2));
        // The old socket's late answer for k1 and the new one's: the first settles it.
        assert_eq!(b.answer("k1"), Some(1));
        assert_eq!(b.answer("k1"), None);
        assert_eq!(b.drain(), [3]);
    }

    #[test]
    fn the_same_key_twice_is_answered_in_order() {
        let mut b = Book::default();
        b.push("k".into(), "f".into(), 1);
        b.push("k".into(), "f".into(), 2);
        assert_eq!(b.outgoing(1, false).len(), 2);
        assert_eq!(b.answer("k"), Some(1));
        assert_eq!(b.answer("k"), Some(2));
        b.push_join("j".into(), "join".into(), 1, 3);
        assert_eq!(b.remove("j"), Some(3));
        assert!(b.drain().is_empty());
    }
}
