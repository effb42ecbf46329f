#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A singly linked list of strings. */
typedef struct node {
    char *value;
    struct node *next;
} node_t;

static node_t *push(node_t *head, const char *value)
{
    node_t *n = malloc(sizeof *n);
    if (n == NULL) {
        perror("malloc");
        exit(EXIT_FAILURE);
    }
    n->value = strdup(value);
    n->next = head;
    return n;
}

static size_t length(const node_t *head)
{
    size_t count = 0;
    for (const node_t *p = head; p != NULL; p = p->next)
        count++;
    return count;
}

static node_t *reverse(node_t *head)
{
    node_t *prev = NULL, *next;
    while (head) {
        next = head->next;
        head->next = prev;
        prev = head;
        head = next;
    }
    return prev;
}

static void free_list(node_t *head)
{
    while (head != NULL) {
        node_t *next = head->next;
        free(head->value);
        free(head);
        head = next;
    }
}

int main(int argc, char **argv)
{
    node_t *list = NULL;
    for (int i = 1; i < argc; ++i)
        list = push(list, argv[i]);
    list = reverse(list);
    printf("%zu items\n", length(list));
    for (node_t *p = list; p; p = p->next)
        printf("  %s%c", p->value, p->next ? ',' : '\n');
    free_list(list);
    return 0;
}
