from miniyaie.cli import main

raise SystemExit(main())
