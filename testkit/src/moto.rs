//! `moto_server` (PyPI `moto[server]`): a real S3 API server on loopback.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use crate::require;

/// A moto S3 server on a free loopback port, stopped on drop.
#[derive(Debug)]
pub struct Moto {
    child: Child,
    port: u16,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Moto {
    /// Starts `moto_server` and waits until it accepts connections.
    pub fn start() -> Result<Moto> {
        require(
            "moto_server",
            &["--help"],
            "python3 -m pip install 'moto[server]' (scripts/test installs it)",
        )?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("spawning moto_server")?;
        let moto = Moto { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "moto_server did not start on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(moto)
    }

    /// Its URL, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket` with `PUT /bucket`, which moto takes unsigned.
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        let port = self.port;
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        ensure!(
            resp.starts_with("HTTP/1.1 200"),
            "creating the bucket {bucket}: {resp}"
        );
        Ok(())
    }
}
