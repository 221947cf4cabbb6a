// Command tinystatic does nothing: the fork/exec floor of a small static Go binary.
package main

func main() {}
