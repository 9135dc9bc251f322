"""The detectors: one module each (a module may emit related finding types), registered with
``registry.detector``. The diagnostics stage imports every module here and runs what registered;
``docs/architecture.md`` says how to add one."""
