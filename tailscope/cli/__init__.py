"""The `tailscope` console script: one module per command, each with add_arguments() and run()."""
