//! How a frame is named and matched: by function and file, shown as `module:function`.
//!
//! The one home of the file → module rule (Python paths: the stdlib, `site-packages`,
//! `dist-packages`, an application's own files), of a module's package, and of the match of a
//! name a person types (`function` or `module:function`) against a frame. Reports, the reverse
//! query (`routes --frame`), flame graphs and diffs all name frames through it.
//!
//! ```
//! use span_profile_export::store::frames::{module_of, FrameId};
//! let f = "/srv/venv/lib/python3.12/site-packages/dateutil/parser/_parser.py";
//! assert_eq!(module_of(f).as_deref(), Some("dateutil.parser._parser"));
//! assert_eq!(FrameId::new("_parse", f).to_string(), "dateutil.parser._parser:_parse");
//! assert!(FrameId::new("_parse", f).matches("dateutil.parser._parser:_parse"));
//! assert!(FrameId::new("_parse", f).matches("_parse"));
//! ```

use std::fmt;

use serde::Serialize;
use span_profile_core::Profile;

/// A frame's identity: its function and its file (lines aside). Two functions of the same
/// name in different files are different frames.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FrameId {
    /// Function name, possibly qualified (`Pricing.calculate`).
    pub function: String,
    /// Source file; empty when unknown.
    pub file: String,
}

/// The leaf frame of a sample's stack, as (function, file): where the sample is counted by
/// self time, in reports, diffs and peer comparisons alike. `None` for an empty stack.
pub fn leaf_frame(p: &Profile, stack: u32) -> Option<(&str, &str)> {
    p.stack_frames(stack)
        .next()
        .map(|f| (f.function.as_str(), f.file.as_str()))
}

impl FrameId {
    /// The frame of `function` in `file`.
    pub fn new(function: impl Into<String>, file: impl Into<String>) -> Self {
        Self {
            function: function.into(),
            file: file.into(),
        }
    }

    /// The module of the file ([`module_of`]).
    pub fn module(&self) -> Option<String> {
        module_of(&self.file)
    }

    /// Whether a name as a person writes it names this frame: `function` (any file),
    /// `module:function` (the module as [`module_of`] derives it), or `file:function` (the
    /// file as stored, or any path suffix of it at a `/`).
    pub fn matches(&self, name: &str) -> bool {
        matches(name, &self.function, &self.file)
    }
}

/// `module:function`, or the function alone when the file gives no module.
impl fmt::Display for FrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match module_of(&self.file) {
            Some(m) => write!(f, "{m}:{}", self.function),
            None => f.write_str(&self.function),
        }
    }
}

/// [`FrameId`]'s display form for a function and file, without building a `FrameId`.
pub fn display_name(function: &str, file: &str) -> String {
    match module_of(file) {
        Some(m) => format!("{m}:{function}"),
        None => function.to_string(),
    }
}

/// [`FrameId::matches`] for a function and file.
pub fn matches(name: &str, function: &str, file: &str) -> bool {
    if name == function {
        return true;
    }
    // The split is at the last `:` before the function: a function name never holds one in
    // Python, while a Rust path does (`std::rt::lang_start`), so that is tried whole first.
    let Some((place, func)) = name.rsplit_once(':') else {
        return false;
    };
    if func != function || place.is_empty() {
        return false;
    }
    module_of(file).as_deref() == Some(place)
        || file == place
        || file
            .strip_suffix(place)
            .is_some_and(|head| head.ends_with('/'))
}

/// The dotted module of a source file, or `None` when the file gives none (empty, or not a
/// Python source file).
///
/// - `<frozen importlib._bootstrap>`, `<string>` and other `<…>` names stay as they are.
/// - Under `site-packages/` or `dist-packages/` (a virtualenv, pip, Debian's packages): the
///   path below that directory, e.g. `dateutil/parser/_parser.py` → `dateutil.parser._parser`.
/// - Under `lib/pythonX.Y/` (the standard library of CPython 3.x: system, pyenv, conda,
///   `python3.13t`) or `Lib/` (Windows): the path below it, e.g. `json.encoder`.
/// - A relative path (an application file as the interpreter was given it): the whole path,
///   e.g. `pricing/rules.py` → `pricing.rules`.
/// - Any other absolute path, when its directory exists on this machine (the report is read
///   where the code is): the name Python gives the module, which is its path below the
///   nearest directory that is not a package (has no `__init__.py`). A script or a module
///   imported from its own directory, `/src/examples/python/checkout.py`, is `checkout`; in
///   a package, `/srv/app/pricing/__init__.py` beside it, `/srv/app/pricing/rules.py` is
///   `pricing.rules`.
/// - Any other absolute path: its directory and file name, e.g. `/srv/app/pricing/rules.py`
///   → `pricing.rules` (the application's root cannot be known from the path alone).
///
/// `__init__.py` names its package; `.py`, `.pyc` and `.pyw` are dropped.
pub fn module_of(file: &str) -> Option<String> {
    if file.starts_with('<') && file.ends_with('>') {
        return Some(file.to_string());
    }
    let path = file.replace('\\', "/");
    let stem = [".py", ".pyc", ".pyw"]
        .iter()
        .find_map(|ext| path.strip_suffix(ext))?;
    let below = library_relative(stem).unwrap_or_else(|| {
        if let Some(below) = below_packages(stem) {
            below
        } else if stem.starts_with('/') || stem.as_bytes().get(1) == Some(&b':') {
            // Absolute: the directory and the file.
            let mut parts = stem.rsplitn(3, '/');
            let file = parts.next().unwrap_or("");
            match parts.next() {
                Some(dir) if !dir.is_empty() && !dir.contains(':') => {
                    &stem[stem.len() - file.len() - dir.len() - 1..]
                }
                _ => &stem[stem.len() - file.len()..],
            }
        } else {
            stem.trim_start_matches("./")
        }
    });
    let below = below.strip_suffix("/__init__").unwrap_or(below);
    let module: Vec<&str> = below.split('/').filter(|p| !p.is_empty()).collect();
    (!module.is_empty()).then(|| module.join("."))
}

/// For an absolute `stem` (a file's path without `.py`, `/` separated) whose directory exists
/// on this machine: its path below the nearest directory without an `__init__.py`, the
/// module name Python gives it. `None` for a relative path or a directory not found here.
/// What is found on disk is cached per directory, so that naming every frame of a day of
/// windows looks at each directory once.
fn below_packages(stem: &str) -> Option<&str> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock, PoisonError};
    /// Per directory: whether it exists, and whether it holds an `__init__.py`.
    static DIRS: OnceLock<Mutex<HashMap<String, (bool, bool)>>> = OnceLock::new();
    if !stem.starts_with('/') {
        return None;
    }
    let lookup = |dir: &str| -> (bool, bool) {
        let dirs = DIRS.get_or_init(Mutex::default);
        // A poisoned lock still holds a valid cache.
        if let Some(&known) = dirs.lock().unwrap_or_else(PoisonError::into_inner).get(dir) {
            return known;
        }
        let path = std::path::Path::new(if dir.is_empty() { "/" } else { dir });
        let found = (path.is_dir(), path.join("__init__.py").is_file());
        dirs.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(dir.to_owned(), found);
        found
    };
    let mut dir = &stem[..stem.rfind('/')?];
    if !lookup(dir).0 {
        return None;
    }
    // Up while the directory is a package; the module starts below the first that is not.
    while lookup(dir).1 {
        dir = &dir[..dir.rfind('/')?];
    }
    Some(&stem[dir.len() + 1..])
}

/// The path below a Python library directory, if `stem` is inside one: the last
/// `site-packages/` or `dist-packages/`, else the last `lib/pythonX.Y/` or `Lib/`.
fn library_relative(stem: &str) -> Option<&str> {
    for dir in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = stem.rfind(dir) {
            return Some(&stem[i + dir.len()..]);
        }
    }
    let mut from = None;
    for (i, _) in stem.match_indices("/python") {
        let rest = &stem[i + "/python".len()..];
        let version = rest.split('/').next().unwrap_or("");
        let is_version = !version.is_empty()
            && version.starts_with(|c: char| c.is_ascii_digit())
            && version
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == 't');
        let in_lib = stem[..i].ends_with("/lib") || stem[..i].ends_with("/lib64");
        if is_version && in_lib && rest.len() > version.len() {
            from = Some(i + "/python".len() + version.len() + 1);
        }
    }
    if let Some(i) = from {
        return Some(&stem[i..]);
    }
    stem.rfind("/Lib/").map(|i| &stem[i + "/Lib/".len()..])
}

/// A module's package: its first dotted component (`dateutil.parser._parser` → `dateutil`).
/// A `<…>` name is its own package.
pub fn package_of(module: &str) -> &str {
    if module.starts_with('<') {
        return module;
    }
    module.split('.').next().unwrap_or(module)
}

/// How a report groups its samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Grouping {
    /// By frame: function and file.
    #[default]
    Function,
    /// By the frame's module ([`module_of`]).
    Module,
    /// By the module's package ([`package_of`]).
    Package,
    /// By function, file and line.
    Line,
}

/// The key a frame of `file` groups under for [`Grouping::Module`] or
/// [`Grouping::Package`]: its module or package, else the file, else `<unknown>`.
pub fn group_key(by: Grouping, file: &str) -> String {
    match (by, module_of(file)) {
        (Grouping::Package, Some(m)) => package_of(&m).to_string(),
        (_, Some(m)) => m,
        (_, None) if !file.is_empty() => file.to_string(),
        (_, None) => "<unknown>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdlib_paths_of_each_layout() {
        for (file, module) in [
            ("/usr/lib/python3.11/json/encoder.py", "json.encoder"),
            ("/usr/lib/python3.9/threading.py", "threading"),
            (
                "/usr/local/lib/python3.10/asyncio/runners.py",
                "asyncio.runners",
            ),
            (
                "/home/u/.pyenv/versions/3.12.4/lib/python3.12/asyncio/base_events.py",
                "asyncio.base_events",
            ),
            ("/opt/conda/lib/python3.13/runpy.py", "runpy"),
            ("/usr/lib/python3.13t/json/__init__.py", "json"),
            ("/usr/lib64/python3.12/logging/__init__.py", "logging"),
            (r"C:\Python312\Lib\json\encoder.py", "json.encoder"),
        ] {
            assert_eq!(module_of(file).as_deref(), Some(module), "{file}");
        }
    }

    #[test]
    fn installed_packages_are_named_below_their_directory() {
        for (file, module) in [
            (
                "/srv/app/.venv/lib/python3.12/site-packages/dateutil/parser/_parser.py",
                "dateutil.parser._parser",
            ),
            (
                "/usr/lib/python3/dist-packages/requests/sessions.py",
                "requests.sessions",
            ),
            (
                "/usr/local/lib/python3.11/site-packages/uvicorn/main.py",
                "uvicorn.main",
            ),
            (
                "/usr/local/lib/python3.11/site-packages/fastapi/routing.py",
                "fastapi.routing",
            ),
        ] {
            assert_eq!(module_of(file).as_deref(), Some(module), "{file}");
            assert_eq!(package_of(module), module.split('.').next().unwrap());
        }
    }

    #[test]
    fn application_files_and_special_names() {
        assert_eq!(
            module_of("pricing/rules.py").as_deref(),
            Some("pricing.rules")
        );
        assert_eq!(module_of("./app.py").as_deref(), Some("app"));
        assert_eq!(
            module_of("/srv/app/pricing/rules.py").as_deref(),
            Some("pricing.rules")
        );
        assert_eq!(module_of("/main.py").as_deref(), Some("main"));
        assert_eq!(
            module_of("<frozen importlib._bootstrap>").as_deref(),
            Some("<frozen importlib._bootstrap>")
        );
        assert_eq!(package_of("<frozen runpy>"), "<frozen runpy>");
        assert_eq!(module_of(""), None);
        assert_eq!(module_of("src/main.rs"), None);
    }

    #[test]
    fn files_on_this_machine_are_named_as_python_names_them() {
        let root =
            std::env::temp_dir().join(format!("span-profile-modules-{}", std::process::id()));
        let at = |p: &str| root.join(p);
        for dir in ["examples/python", "srv/app/shop/pricing"] {
            std::fs::create_dir_all(at(dir)).unwrap();
        }
        for init in [
            "srv/app/shop/__init__.py",
            "srv/app/shop/pricing/__init__.py",
        ] {
            std::fs::write(at(init), "").unwrap();
        }
        let name = |p: &str| module_of(at(p).to_str().unwrap());
        // A script, or a module imported from its own directory: its file name.
        assert_eq!(
            name("examples/python/checkout.py").as_deref(),
            Some("checkout")
        );
        // In packages: the path below the first directory that is not one.
        assert_eq!(
            name("srv/app/shop/pricing/rules.py").as_deref(),
            Some("shop.pricing.rules")
        );
        assert_eq!(
            name("srv/app/shop/pricing/__init__.py").as_deref(),
            Some("shop.pricing")
        );
        assert_eq!(name("srv/app/shop/cart.py").as_deref(), Some("shop.cart"));
        assert_eq!(name("srv/app/main.py").as_deref(), Some("main"));
        // A directory not on this machine: its directory and file name.
        assert_eq!(
            name("srv/gone/pricing/rules.py").as_deref(),
            Some("pricing.rules")
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn names_match_by_function_module_or_file() {
        let uvicorn = FrameId::new("run", "/venv/lib/python3.12/site-packages/uvicorn/main.py");
        let asyncio = FrameId::new("run", "/usr/lib/python3.12/asyncio/runners.py");
        assert_eq!(uvicorn.to_string(), "uvicorn.main:run");
        assert_eq!(asyncio.to_string(), "asyncio.runners:run");
        assert!(uvicorn.matches("run") && asyncio.matches("run"));
        assert!(uvicorn.matches("uvicorn.main:run") && !asyncio.matches("uvicorn.main:run"));
        assert!(asyncio.matches("asyncio/runners.py:run"));
        assert!(!asyncio.matches("ners.py:run"));
        assert!(!uvicorn.matches("main:run"));
        let rust = FrameId::new("std::rt::lang_start", "src/rt.rs");
        assert!(rust.matches("std::rt::lang_start"));
        assert_eq!(rust.to_string(), "std::rt::lang_start");
    }

    #[test]
    fn group_keys_fall_back_to_the_file() {
        let f = "/venv/lib/python3.12/site-packages/dateutil/parser/_parser.py";
        assert_eq!(group_key(Grouping::Module, f), "dateutil.parser._parser");
        assert_eq!(group_key(Grouping::Package, f), "dateutil");
        assert_eq!(group_key(Grouping::Package, "src/main.rs"), "src/main.rs");
        assert_eq!(group_key(Grouping::Module, ""), "<unknown>");
    }
}
