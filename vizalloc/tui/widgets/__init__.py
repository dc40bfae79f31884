"""Custom widgets: a virtual table and the memory map (both draw only visible lines)."""
