"""A PEP 517 build backend for this one package, standard library only (pyproject.toml).

It writes a py3-none-any wheel of package steward_lance (the modules [tool.wheelbuild] lists, and
an empty __init__.py), with the metadata, console scripts and RECORD pip needs. Byte for byte the
same wheel for the same sources: fixed timestamps and order.
"""

import base64
import hashlib
import os
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "steward_lance"
EPOCH = (1980, 1, 1, 0, 0, 0)


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def _metadata(project):
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project['description']}", f"License: {project['license']}",
             f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {d}" for d in project["dependencies"]]
    return "\n".join(lines) + "\n"


def _files(cfg):
    project = cfg["project"]
    dist = f"{project['name'].replace('-', '_')}-{project['version']}"
    files = [(f"{PACKAGE}/__init__.py", b'"""steward\'s Lance engine (docs/ENGINE.md)."""\n')]
    for mod in cfg["tool"]["wheelbuild"]["modules"]:
        with open(os.path.join(HERE, mod), "rb") as f:
            files.append((f"{PACKAGE}/{mod}", f.read()))
    scripts = "".join(f"{k} = {v}\n" for k, v in project["scripts"].items())
    files += [(f"{dist}.dist-info/METADATA", _metadata(project).encode()),
              (f"{dist}.dist-info/WHEEL", b"Wheel-Version: 1.0\nGenerator: steward wheelbuild\n"
                                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
              (f"{dist}.dist-info/entry_points.txt", f"[console_scripts]\n{scripts}".encode())]
    return dist, files


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist, files = _files(_project())
    name = f"{dist}-py3-none-any.whl"
    record = "".join(_record_line(n, d) for n, d in files) + f"{dist}.dist-info/RECORD,,\n"
    files.append((f"{dist}.dist-info/RECORD", record.encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name
