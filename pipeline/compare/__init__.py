"""Compare two analyzed captures: what got faster or slower, down to class, operator and collective."""
