package com.example;

import java.util.List;
import java.util.ArrayList;

public class Stack {
    private List<Integer> items = new ArrayList<Integer>();

    public void push(int x) {
        items.add(x);
    }

    public int pop() {
        int last = items.get(items.size() - 1);
        items.remove(items.size() - 1);
        return last;
    }

    public boolean isEmpty() {
        return items.size() == 0;
    }
}
