//go:build !linux

package main

import "errors"

func hugePages() error { return errors.New("transparent huge pages are a Linux feature") }
