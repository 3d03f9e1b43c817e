//! The embedded default store: one JSON file, replaced atomically.
//!
//! # Crash safety
//! A commit writes the whole document to `<file>.tmp` in the same directory, fsyncs it,
//! renames it over `<file>` and fsyncs the directory. A crash at any point leaves either the
//! old or the new complete file. A leftover `<file>.tmp` from a crash is ignored by `load`
//! and overwritten by the next commit (it is not deleted by `load`, so a `checkpoint show`
//! next to a running relay cannot remove the relay's in-progress temp file).
//!
//! A checkpoint file that exists but is empty, truncated or not a checkpoint is an error
//! naming the path ([`CheckpointStoreError::Corrupt`]), never a restart from zero. A missing
//! directory is an error ([`CheckpointStoreError::MissingDirectory`]); the store does not
//! create it. A missing file in an existing directory is "never committed" (`None`).
//!
//! # Leader epochs: single host only
//! A commit that carries a leader epoch (`[ha]`) re-reads the file before writing and applies
//! [`crate::check_commit`] to what it finds, so a stale leader is refused once a newer one
//! wrote. The read and the rename are not one atomic step across processes (there is no
//! lock between relays), and a file on a network file system gives no ordering at all:
//! the file store fences stale leaders only between relays on **one host** sharing a local
//! file, and even there a write racing the new leader's take-over can land (a replay,
//! never a loss). Several hosts need the MySQL (or Kafka) store, which enforces the rule
//! atomically.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::checkpoint::Checkpoint;
use crate::store::{check_commit, CheckpointStore, CheckpointStoreError, StoreFuture};

/// A checkpoint kept in one JSON file. See the module docs.
#[derive(Debug, Clone)]
pub struct FileCheckpointStore {
    /// Shared with the blocking tasks that do the file I/O.
    inner: Arc<FileStoreInner>,
}

#[derive(Debug)]
struct FileStoreInner {
    /// The checkpoint file.
    path: PathBuf,
    /// `<path>.tmp`: written and fsynced before the rename.
    temp_path: PathBuf,
    /// The directory holding both, fsynced after the rename so the rename is durable.
    directory: PathBuf,
    /// The last checkpoint read or written by this store (`Some(None)`: known to be absent),
    /// for the regression check without re-reading the file on every commit; `None` until
    /// known.
    last_stored: Mutex<Option<Option<Checkpoint>>>,
    /// Held while writing or removing: two commits of this process writing the one temp file
    /// at once could rename a half-written file into place.
    write_lock: Mutex<()>,
}

impl FileCheckpointStore {
    /// A store for the checkpoint file at `path`. No I/O happens until the first call.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let mut temp_name = path.file_name().unwrap_or_default().to_os_string();
        temp_name.push(".tmp");
        let temp_path = path.with_file_name(temp_name);
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Self {
            inner: Arc::new(FileStoreInner {
                path,
                temp_path,
                directory,
                last_stored: Mutex::new(None),
                write_lock: Mutex::new(()),
            }),
        }
    }

    /// The checkpoint file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The temporary file a commit writes before renaming it over [`FileCheckpointStore::path`].
    pub fn temp_path(&self) -> &Path {
        &self.inner.temp_path
    }

    /// Runs blocking file I/O off the async runtime.
    fn run_blocking<T, F>(&self, work: F) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&FileStoreInner) -> Result<T, CheckpointStoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let location = inner.path.display().to_string();
            tokio::task::spawn_blocking(move || work(&inner))
                .await
                .map_err(|error| CheckpointStoreError::Task {
                    location,
                    message: error.to_string(),
                })?
        })
    }
}

/// Maps an I/O failure of `operation` on `path` to [`CheckpointStoreError::Io`].
fn io_error(
    operation: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> CheckpointStoreError {
    let path = path.to_path_buf();
    move |source| CheckpointStoreError::Io {
        operation,
        path,
        source,
    }
}

impl FileStoreInner {
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn remember(&self, checkpoint: Option<Checkpoint>) {
        if let Ok(mut last) = self.last_stored.lock() {
            *last = Some(checkpoint);
        }
    }

    /// `None` when not known yet (then the file is read).
    fn remembered(&self) -> Option<Option<Checkpoint>> {
        self.last_stored.lock().ok().and_then(|last| last.clone())
    }

    fn check_directory(&self) -> Result<(), CheckpointStoreError> {
        match fs::metadata(&self.directory) {
            Ok(metadata) if metadata.is_dir() => Ok(()),
            Ok(_) => Err(CheckpointStoreError::Io {
                operation: "checking checkpoint directory",
                path: self.directory.clone(),
                source: std::io::Error::other("it exists but is not a directory"),
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Err(CheckpointStoreError::MissingDirectory {
                    directory: self.directory.clone(),
                })
            }
            Err(source) => Err(CheckpointStoreError::Io {
                operation: "reading checkpoint directory",
                path: self.directory.clone(),
                source,
            }),
        }
    }

    fn read(&self) -> Result<Option<Checkpoint>, CheckpointStoreError> {
        self.check_directory()?;
        let text = match fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                self.remember(None);
                return Ok(None);
            }
            Err(error) if error.kind() == std::io::ErrorKind::InvalidData => {
                return Err(CheckpointStoreError::Corrupt {
                    location: self.location(),
                    source: crate::checkpoint::CheckpointFormatError::Invalid {
                        reason: "the file is not UTF-8 text".to_owned(),
                    },
                })
            }
            Err(source) => {
                return Err(CheckpointStoreError::Io {
                    operation: "reading checkpoint file",
                    path: self.path.clone(),
                    source,
                })
            }
        };
        let checkpoint =
            Checkpoint::from_json(&text).map_err(|source| CheckpointStoreError::Corrupt {
                location: self.location(),
                source,
            })?;
        self.remember(Some(checkpoint.clone()));
        Ok(Some(checkpoint))
    }

    /// Serializes writers (commit, write, remove). A poisoned lock only means another write
    /// panicked; the file is still consistent.
    fn lock_writes(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write_lock
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Flushes the directory entry (a rename or removal) to disk: without it a crash could
    /// bring back the previous checkpoint file.
    fn sync_directory(&self) -> Result<(), CheckpointStoreError> {
        let directory = fs::File::open(&self.directory)
            .map_err(io_error("opening checkpoint directory", &self.directory))?;
        directory
            .sync_all()
            .map_err(io_error("syncing checkpoint directory", &self.directory))
    }

    /// Writes the temp file and renames it into place; the caller holds `write_lock`.
    fn write_unlocked(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointStoreError> {
        self.check_directory()?;
        let mut document = checkpoint.to_json();
        document.push('\n');
        let mut temp = fs::File::create(&self.temp_path).map_err(io_error(
            "creating temporary checkpoint file",
            &self.temp_path,
        ))?;
        temp.write_all(document.as_bytes()).map_err(io_error(
            "writing temporary checkpoint file",
            &self.temp_path,
        ))?;
        temp.sync_all().map_err(io_error(
            "syncing temporary checkpoint file",
            &self.temp_path,
        ))?;
        drop(temp);
        fs::rename(&self.temp_path, &self.path).map_err(io_error(
            "renaming temporary checkpoint file over",
            &self.path,
        ))?;
        self.sync_directory()?;
        self.remember(Some(checkpoint.clone()));
        Ok(())
    }

    fn commit(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointStoreError> {
        let _writing = self.lock_writes();
        // Under [ha] another relay (on this host) may have written since: read the file.
        let remembered = match checkpoint.leader_epoch {
            Some(_) => None,
            None => self.remembered(),
        };
        let stored = match remembered {
            Some(stored) => stored,
            None => self.read()?,
        };
        check_commit(&self.location(), stored.as_ref(), checkpoint)?;
        self.write_unlocked(checkpoint)
    }

    fn write(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointStoreError> {
        let _writing = self.lock_writes();
        self.write_unlocked(checkpoint)
    }

    fn remove(&self) -> Result<(), CheckpointStoreError> {
        let _writing = self.lock_writes();
        self.check_directory()?;
        match fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(CheckpointStoreError::Io {
                    operation: "removing checkpoint file",
                    path: self.path.clone(),
                    source,
                })
            }
        }
        self.sync_directory()?;
        self.remember(None);
        Ok(())
    }
}

impl CheckpointStore for FileCheckpointStore {
    fn describe(&self) -> String {
        format!("file {}", self.inner.path.display())
    }

    fn load(&self) -> StoreFuture<'_, Option<Checkpoint>> {
        self.run_blocking(FileStoreInner::read)
    }

    fn commit<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        let checkpoint = checkpoint.clone();
        self.run_blocking(move |inner| inner.commit(&checkpoint))
    }

    fn set<'a>(&'a self, checkpoint: &'a Checkpoint) -> StoreFuture<'a, ()> {
        let checkpoint = checkpoint.clone();
        self.run_blocking(move |inner| inner.write(&checkpoint))
    }

    fn reset(&self) -> StoreFuture<'_, ()> {
        self.run_blocking(FileStoreInner::remove)
    }
}
