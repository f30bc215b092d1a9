"""Pure functions: parsers, folded / SVG / pprof round trips, classification of given stacks,
the store on temporary SQLite files, the CLI on files. No target process, server or browser;
``make test-fast`` runs this tier alone."""
