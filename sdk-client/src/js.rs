//! The browser SDK (`sdk-client/js/`), embedded: the scheduler and every node serve these files
//! at `/sdk/{name}` (`ferry.js` is the entry module).

include!(concat!(env!("OUT_DIR"), "/js_files.rs"));

/// The file called `name`, if the SDK has one.
pub fn file(name: &str) -> Option<&'static str> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_entry_module_and_the_machine_are_embedded() {
        for name in [
            "ferry.js",
            "fsm.js",
            "room.js",
            "room-view.js",
            "ferry.d.ts",
        ] {
            assert!(super::file(name).is_some_and(|c| !c.is_empty()), "{name}");
        }
        assert_eq!(super::file("../Cargo.toml"), None);
    }
}
