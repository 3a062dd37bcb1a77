"""``python -m syncguard report …`` (same as the ``syncguard`` console script)."""
from syncguard.cli import main

raise SystemExit(main())
