"""``python -m syncguard report …`` (same as the ``syncguard`` console script)."""
from .cli import main

raise SystemExit(main())
