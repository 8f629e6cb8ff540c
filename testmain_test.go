package main

import (
	"testing"

	"github.com/awareness/awareness/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
