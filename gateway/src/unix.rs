//! The Unix-domain socket, so that `psql -p 5433` without `-h` reaches the
//! server as it reaches PostgreSQL: a socket `DIR/.s.PGSQL.PORT` (on
//! Debian, psql and libpq look in `/var/run/postgresql`).
//!
//! Each connection on it is relayed to the server's TCP listener on
//! loopback, so admission control, cancel requests, authentication and the
//! connection threads are the TCP path's own, with no second copy of them
//! to keep right; the relay costs one local copy each way. A client on the
//! socket is a local one, as a loopback client is, so trust authentication
//! applies to both alike.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// A listening socket file; removed when dropped.
#[derive(Debug)]
pub struct UnixRelay {
    path: PathBuf,
    task: JoinHandle<()>,
}

impl UnixRelay {
    /// Listens on `dir/.s.PGSQL.<port of tcp>` and relays every connection
    /// to `tcp`. A socket file left by a server that is gone is replaced;
    /// one another server still answers on is an error.
    pub async fn start(dir: &Path, tcp: SocketAddr) -> std::io::Result<UnixRelay> {
        let path = dir.join(format!(".s.PGSQL.{}", tcp.port()));
        if path.exists() {
            if UnixStream::connect(&path).await.is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("another server listens on {}", path.display()),
                ));
            }
            std::fs::remove_file(&path)?;
        }
        let listener = UnixListener::bind(&path)?;
        // Any local user may connect, as to PostgreSQL's socket
        // (unix_socket_permissions 0777): authentication decides.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
        let target = SocketAddr::new(loopback_for(tcp.ip()), tcp.port());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    // Out of descriptors, for instance: let some close.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(target).await {
                        let _ = server.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Ok(UnixRelay { path, task })
    }

    /// The socket file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for UnixRelay {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where to reach a listener bound to `ip` from this machine.
fn loopback_for(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn relays_both_ways_and_replaces_a_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        // A stale file from a server that is gone.
        let stale = dir.path().join(format!(".s.PGSQL.{}", addr.port()));
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        let relay = UnixRelay::start(dir.path(), addr).await.unwrap();
        assert_eq!(relay.path(), stale);
        let echo = tokio::spawn(async move {
            let (mut s, _) = tcp.accept().await.unwrap();
            let mut buf = [0u8; 5];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
        });
        let mut c = UnixStream::connect(relay.path()).await.unwrap();
        c.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        c.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
        echo.await.unwrap();
        // A second server on the same port's socket is refused.
        let err = UnixRelay::start(dir.path(), addr).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        let path = relay.path().to_owned();
        drop(relay);
        assert!(!path.exists());
    }
}
