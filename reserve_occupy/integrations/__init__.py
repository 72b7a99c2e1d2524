"""Reserve–Occupy inside other RL frameworks: one optional module per framework, each importing
its framework itself (install the matching extra); the core never imports them."""
